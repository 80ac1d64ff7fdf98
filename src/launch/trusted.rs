//! Directories that torchtop writes its own files into (`run`'s site directory, `attach`'s
//! scratch directory), opened so that no other user can redirect a write or an import.
//!
//! A [`TrustedDir`] is opened from `/` one component at a time with `openat(O_NOFOLLOW)`. Each
//! component must be a real directory owned by root or by us, and not writable by other users
//! unless it is sticky (as `/tmp` is: there, others cannot rename or remove what we own). After
//! that walk nobody but root and us can change what the path names, so handing the path to a
//! child (PYTHONPATH) is safe. Files are created with `O_CREAT|O_EXCL|O_NOFOLLOW` relative to
//! the directory's descriptor.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fchmod, fstat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

use crate::sys::effective_uid;

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);
/// The most a file compared by [`TrustedDir::ensure_file`] may hold.
const COMPARE_LIMIT: u64 = 16 << 20;

/// A directory reached safely from `/`, held open.
#[derive(Debug)]
pub(crate) struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
    stat: FileStat,
    /// Every component, this one included, lets other users pass through (mode o+x).
    others_can_search: bool,
}

fn describe(path: &Path) -> String {
    path.display().to_string()
}

fn errno_sentence(path: &Path, what: &str, e: Errno) -> String {
    match e {
        Errno::ELOOP => format!(
            "{} is a symlink, and torchtop does not follow symlinks where it writes.",
            describe(path)
        ),
        Errno::ENOTDIR => format!("{} is not a directory.", describe(path)),
        _ => format!("Cannot {what} {}: {}.", describe(path), e.desc()),
    }
}

/// The rule for every component on the way: a directory owned by root or us, not writable by
/// others unless sticky.
fn check_component(path: &Path, stat: &FileStat, me: u32) -> Result<(), String> {
    if stat.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFDIR.bits() {
        return Err(format!("{} is not a directory.", describe(path)));
    }
    if stat.st_uid != 0 && stat.st_uid != me {
        return Err(format!(
            "{} is owned by uid {}, neither root nor us (uid {me}); torchtop writes only in directories that root or we own.",
            describe(path),
            stat.st_uid
        ));
    }
    let sticky = stat.st_mode & 0o1000 != 0;
    if stat.st_mode & 0o022 != 0 && !sticky {
        return Err(format!(
            "{} is writable by other users (mode {:o}), so another user could replace what torchtop puts there.",
            describe(path),
            stat.st_mode & 0o7777
        ));
    }
    Ok(())
}

impl TrustedDir {
    /// Opens `path` from `/`, checking every component; with `create`, missing components are
    /// made (mode 0700) on the way. A relative path is taken from the current directory.
    pub(crate) fn open(path: &Path, create: bool) -> Result<TrustedDir, String> {
        let absolute = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| format!("Cannot resolve {}: {e}.", describe(path)))?
                .join(path)
        };
        let root = nix::fcntl::open("/", DIR_FLAGS, Mode::empty())
            .map_err(|e| errno_sentence(Path::new("/"), "open", e))?;
        let mut dir = TrustedDir::from_fd(root, PathBuf::from("/"), true)?;
        for component in absolute.components() {
            match component {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(name) => dir = dir.step(name, create)?,
                Component::ParentDir | Component::Prefix(_) => {
                    return Err(format!(
                        "{} contains '..'; give torchtop a plain path.",
                        describe(path)
                    ))
                }
            }
        }
        Ok(dir)
    }

    fn from_fd(fd: OwnedFd, path: PathBuf, parent_searchable: bool) -> Result<TrustedDir, String> {
        let stat = fstat(&fd).map_err(|e| errno_sentence(&path, "inspect", e))?;
        check_component(&path, &stat, effective_uid())?;
        Ok(TrustedDir {
            others_can_search: parent_searchable && stat.st_mode & 0o001 != 0,
            fd,
            path,
            stat,
        })
    }

    fn step(&self, name: &OsStr, create: bool) -> Result<TrustedDir, String> {
        let path = self.path.join(name);
        let fd = match openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
            Err(Errno::ENOENT) if create => {
                match mkdirat(&self.fd, name, Mode::from_bits_truncate(0o700)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(errno_sentence(&path, "create", e)),
                }
                openat(&self.fd, name, DIR_FLAGS, Mode::empty())
            }
            other => other,
        }
        .map_err(|e| match e {
            // O_NOFOLLOW|O_DIRECTORY on a symlink says ENOTDIR; say what it really is.
            Errno::ENOTDIR if self.is_symlink(name) => errno_sentence(&path, "open", Errno::ELOOP),
            e => errno_sentence(&path, "open", e),
        })?;
        TrustedDir::from_fd(fd, path, self.others_can_search)
    }

    fn is_symlink(&self, name: &OsStr) -> bool {
        nix::sys::stat::fstatat(&self.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|s| s.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a process of another user can reach files in here by name.
    pub(crate) fn others_can_search(&self) -> bool {
        self.others_can_search
    }

    /// Refuses unless this directory is ours and accessible by us only (mode 0700 or stricter).
    pub(crate) fn require_private(&self) -> Result<(), String> {
        let me = effective_uid();
        if self.stat.st_uid != me {
            return Err(format!(
                "{} is owned by uid {}, not by us (uid {me}).",
                describe(&self.path),
                self.stat.st_uid
            ));
        }
        if self.stat.st_mode & 0o077 != 0 {
            return Err(format!(
                "{} has mode {:o}; it must be accessible by its owner only (0700).",
                describe(&self.path),
                self.stat.st_mode & 0o7777
            ));
        }
        Ok(())
    }

    /// Opens the child directory `name`, creating it 0700 when missing; it must be private.
    pub(crate) fn private_child(&self, name: &str) -> Result<TrustedDir, String> {
        let child = self.step(OsStr::new(name), true)?;
        child.require_private()?;
        Ok(child)
    }

    /// Creates file `name` fresh (it must not exist) with `mode`, open for reading and writing.
    pub(crate) fn create_file(&self, name: &str, mode: u32) -> Result<File, String> {
        let flags =
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&self.fd, name, flags, Mode::from_bits_truncate(mode))
            .map_err(|e| errno_sentence(&self.path.join(name), "create", e))?;
        // The umask may have cleared bits that were asked for (0644 under umask 077).
        fchmod(&fd, Mode::from_bits_truncate(mode))
            .map_err(|e| errno_sentence(&self.path.join(name), "set the mode of", e))?;
        Ok(File::from(fd))
    }

    /// Creates file `name` fresh with `content` and `mode`.
    pub(crate) fn write_new_file(
        &self,
        name: &str,
        content: &[u8],
        mode: u32,
    ) -> Result<(), String> {
        let written = self
            .create_file(name, mode)?
            .write_all(content)
            .map_err(|e| format!("Cannot write {}: {e}.", describe(&self.path.join(name))));
        if written.is_err() {
            let _ = unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir);
        }
        written
    }

    /// Makes file `name` hold `content` with `mode`: kept when an existing regular file of ours
    /// already does, else replaced through a fresh temporary file and a rename, so a reader
    /// never sees half a file.
    pub(crate) fn ensure_file(&self, name: &str, content: &[u8], mode: u32) -> Result<(), String> {
        if self.holds(name, content, mode) {
            return Ok(());
        }
        let tmp = format!(".{name}.{}.tmp", random_hex());
        self.write_new_file(&tmp, content, mode)?;
        nix::fcntl::renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(|e| {
            let _ = unlinkat(&self.fd, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
            errno_sentence(&self.path.join(name), "replace", e)
        })
    }

    fn holds(&self, name: &str, content: &[u8], mode: u32) -> bool {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let Ok(fd) = openat(&self.fd, name, flags, Mode::empty()) else {
            return false;
        };
        let Ok(stat) = fstat(&fd) else {
            return false;
        };
        let regular = stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits();
        if !regular || stat.st_uid != effective_uid() || stat.st_mode & 0o7777 != mode {
            return false;
        }
        let mut old = Vec::new();
        File::from(fd)
            .take(COMPARE_LIMIT)
            .read_to_end(&mut old)
            .is_ok_and(|_| old == content)
    }

    /// A new directory in here with a random name and `mode`, removed with its files on drop.
    pub(crate) fn fresh_dir(&self, prefix: &str, mode: u32) -> Result<FreshDir, String> {
        for _ in 0..16 {
            let name = format!("{prefix}{}", random_hex());
            match mkdirat(&self.fd, name.as_str(), Mode::from_bits_truncate(0o700)) {
                Ok(()) => {}
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(errno_sentence(&self.path.join(&name), "create", e)),
            }
            let parent = self
                .fd
                .try_clone()
                .map_err(|e| format!("Cannot duplicate a descriptor: {e}."))?;
            let mut fresh = FreshDir {
                parent,
                name,
                dir: None,
            };
            let dir = self.step(OsStr::new(&fresh.name), false)?;
            fchmod(&dir.fd, Mode::from_bits_truncate(mode))
                .map_err(|e| errno_sentence(dir.path(), "set the mode of", e))?;
            let stat = fstat(&dir.fd).map_err(|e| errno_sentence(dir.path(), "inspect", e))?;
            fresh.dir = Some(TrustedDir { stat, ..dir });
            return Ok(fresh);
        }
        Err(format!(
            "Cannot find a free name for a new directory in {}.",
            describe(&self.path)
        ))
    }
}

/// A directory that torchtop created in this call; it and its files go away on drop.
#[derive(Debug)]
pub(crate) struct FreshDir {
    parent: OwnedFd,
    name: String,
    /// `None` only while it is being set up.
    dir: Option<TrustedDir>,
}

impl FreshDir {
    pub(crate) fn dir(&self) -> &TrustedDir {
        self.dir
            .as_ref()
            .expect("a FreshDir is returned only once set up")
    }
}

impl Drop for FreshDir {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            // Only torchtop can create entries in here (nobody else may write to it).
            if let Ok(mut listing) = dir
                .fd
                .try_clone()
                .map_err(|_| ())
                .and_then(|fd| nix::dir::Dir::from_fd(fd).map_err(|_| ()))
            {
                let names: Vec<_> = listing
                    .iter()
                    .filter_map(Result::ok)
                    .map(|entry| entry.file_name().to_owned())
                    .filter(|name| name.to_bytes() != b"." && name.to_bytes() != b"..")
                    .collect();
                for name in names {
                    let _ = unlinkat(dir.fd.as_fd(), name.as_c_str(), UnlinkatFlags::NoRemoveDir);
                }
            }
        }
        let _ = unlinkat(&self.parent, self.name.as_str(), UnlinkatFlags::RemoveDir);
    }
}

/// 16 hex digits from the kernel's random source, for names nobody can predict.
fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    // The getrandom crate, not libc::getrandom: that symbol needs glibc 2.25 (the wheels are
    // built for glibc 2.17), and the crate falls back to /dev/urandom on kernels before 3.17.
    if getrandom::fill(&mut bytes).is_err() {
        // Still unique enough with O_EXCL retries: the time and our pid.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        bytes = (u64::from(nanos) << 32 | u64::from(std::process::id())).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn scratch() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("tt-trusted-")
            .tempdir()
            .unwrap()
    }

    #[test]
    fn creates_missing_components_private_and_writes_files() {
        let temp = scratch();
        let path = temp.path().join("a/b");
        let dir = TrustedDir::open(&path, true).unwrap();
        dir.require_private().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o700);
        dir.ensure_file("x.py", b"one", 0o600).unwrap();
        dir.ensure_file("x.py", b"one", 0o600).unwrap();
        assert_eq!(std::fs::read(path.join("x.py")).unwrap(), b"one");
        std::fs::write(path.join("x.py"), "tampered").unwrap();
        dir.ensure_file("x.py", b"one", 0o600).unwrap();
        assert_eq!(std::fs::read(path.join("x.py")).unwrap(), b"one");
        assert!(dir
            .create_file("x.py", 0o600)
            .unwrap_err()
            .contains("Cannot create"));
    }

    #[test]
    fn symlinks_and_open_directories_are_refused() {
        let temp = scratch();
        let real = temp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = temp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = TrustedDir::open(&link.join("below"), true).unwrap_err();
        assert!(err.contains("is a symlink"), "{err}");
        assert!(!real.join("below").exists());

        let open = temp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = TrustedDir::open(&open.join("x"), true).unwrap_err();
        assert!(err.contains("writable by other users"), "{err}");

        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        TrustedDir::open(&open.join("x"), true).unwrap();

        let file = temp.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = TrustedDir::open(&file.join("x"), true).unwrap_err();
        assert!(err.contains("not a directory"), "{err}");
        let err = TrustedDir::open(Path::new("/tmp/../etc"), false).unwrap_err();
        assert!(err.contains("'..'"), "{err}");
    }

    #[test]
    fn planted_symlink_file_is_replaced_not_followed() {
        let temp = scratch();
        let dir = TrustedDir::open(&temp.path().join("d"), true).unwrap();
        let victim = temp.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, temp.path().join("d/x.py")).unwrap();
        dir.ensure_file("x.py", b"ours", 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(std::fs::read(temp.path().join("d/x.py")).unwrap(), b"ours");
        assert!(!std::fs::symlink_metadata(temp.path().join("d/x.py"))
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn fresh_dirs_are_new_and_vanish_with_their_files() {
        let temp = scratch();
        let base = TrustedDir::open(temp.path(), false).unwrap();
        let fresh = base.fresh_dir("t-", 0o711).unwrap();
        let path = fresh.dir().path().to_path_buf();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o711);
        fresh.dir().write_new_file("a", b"x", 0o644).unwrap();
        assert_eq!(
            std::fs::metadata(path.join("a")).unwrap().mode() & 0o777,
            0o644
        );
        let other = base.fresh_dir("t-", 0o700).unwrap();
        assert_ne!(other.dir().path(), path);
        drop(fresh);
        assert!(!path.exists());
        assert!(other.dir().path().exists());
    }
}
