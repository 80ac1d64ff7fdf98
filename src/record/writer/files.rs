//! The files of a recording: created safely (never through a symbolic link, never over another
//! file, readable by their owner only), recognised by their magic, and rotated by number with
//! the oldest deleted. Nothing that is not a recording is ever moved or deleted.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::record::{format, RecordError};

pub(super) fn io_error(path: &Path, what: &str, error: &std::io::Error) -> RecordError {
    RecordError(format!(
        "could not {what} {}: {error}",
        crate::format::escape(&path.display().to_string())
    ))
}

/// Refuses an `-o` that can name no new file, in a sentence that says why: a directory, or a
/// file in a directory that does not exist.
pub(super) fn refuse_unusable_path(path: &Path) -> Result<(), RecordError> {
    let shown = |p: &Path| crate::format::escape(&p.display().to_string()).into_owned();
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(RecordError(format!(
            "{} is a directory: -o names the recording's file, such as {}",
            shown(path),
            shown(&path.join("torchtop.ttrec"))
        )));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(RecordError(format!(
            "not recording into {}: {} is not a directory",
            shown(path),
            shown(dir)
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(RecordError(format!(
            "not recording into {}: the directory {} does not exist",
            shown(path),
            shown(dir)
        ))),
        Err(e) => Err(io_error(dir, "read", &e)),
    }
}

/// As root, refuses to record into a directory another user owns or can write to (itself or
/// one above it; a sticky one such as /tmp excepted): they could swap a directory of the path
/// for a symlink between two of the recording's writes (it creates, rotates and deletes
/// `FILE.N`), and root's files would land where they chose. Other users record where they like:
/// they write only what they could write anyway.
pub(super) fn refuse_others_directory(path: &Path) -> Result<(), RecordError> {
    if crate::sys::effective_uid() != 0 {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    crate::sys::refuse_unsafe_directory(dir).map_err(|e| {
        RecordError(format!(
            "not recording as root into {}: {e}; record into a directory of root's",
            crate::format::escape(&path.display().to_string())
        ))
    })
}

/// A new file, never through a symbolic link and never over an existing file; readable by its
/// owner only, since it holds other users' command lines.
pub(super) fn create_file(path: &Path) -> Result<File, RecordError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io_error(path, "create", &e))
}

/// Whether `path` is a recording (read without following a symbolic link); `None` if absent.
fn is_recording(path: &Path) -> Result<Option<bool>, RecordError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path);
    let mut file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(Some(false)),
        Err(e) => return Err(io_error(path, "open", &e)),
    };
    let mut magic = [0u8; 8];
    let read = file.read(&mut magic).unwrap_or(0);
    Ok(Some(read == magic.len() && &magic == format::MAGIC))
}

fn numbered(path: &Path, n: u64) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// The most numbered files kept under a size budget: restarts that each leave a small file
/// keep their files, but not without end.
const MAX_NUMBERED_FILES: u64 = 64;

/// Moves `FILE` to `FILE.1`, `FILE.1` to `FILE.2` and so on; with `budget`, the oldest numbered
/// files are then deleted until the rest take at most `budget` bytes (and number at most
/// [`MAX_NUMBERED_FILES`]). A count of files kept instead made a restart loop, each run a few
/// KB, delete the night's recording after three restarts. Only recordings are moved or
/// deleted: anything else in the way stops with a sentence.
pub(super) fn rotate(path: &Path, budget: Option<u64>) -> Result<(), RecordError> {
    match is_recording(path)? {
        None => return Ok(()),
        Some(false) => {
            let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            let what = if link {
                "is a symbolic link, which torchtop does not write through"
            } else {
                "exists and is not a torchtop recording"
            };
            return Err(RecordError(format!(
                "{} {what}: choose another name with -o",
                crate::format::escape(&path.display().to_string())
            )));
        }
        Some(true) => {}
    }
    let mut highest = 0;
    while is_recording(&numbered(path, highest + 1))?.is_some() {
        highest += 1;
    }
    for n in (1..=highest).rev() {
        let from = numbered(path, n);
        if is_recording(&from)? != Some(true) {
            return Err(RecordError(format!(
                "{} is not a torchtop recording, so it is left alone; choose another name with -o",
                crate::format::escape(&from.display().to_string())
            )));
        }
        let to = numbered(path, n + 1);
        std::fs::rename(&from, &to).map_err(|e| io_error(&from, "rename", &e))?;
    }
    std::fs::rename(path, numbered(path, 1)).map_err(|e| io_error(path, "rename", &e))?;
    match budget {
        Some(budget) => trim(path, highest + 1, budget),
        None => Ok(()),
    }
}

/// Deletes the oldest of `FILE.1` to `FILE.highest` past `budget` bytes in all.
fn trim(path: &Path, highest: u64, budget: u64) -> Result<(), RecordError> {
    let mut total = 0u64;
    for n in 1..=highest {
        let file = numbered(path, n);
        let size = std::fs::symlink_metadata(&file).map_or(0, |m| m.len());
        total = total.saturating_add(size);
        if total > budget || n > MAX_NUMBERED_FILES {
            for old in n..=highest {
                let old = numbered(path, old);
                std::fs::remove_file(&old).map_err(|e| io_error(&old, "delete", &e))?;
            }
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A security review: root recorded into a directory another user owned, where that user
    /// could put a symlink in the path between two of the recording's writes.
    #[test]
    fn root_does_not_record_into_another_users_directory() {
        let scratch = tempfile::tempdir().unwrap();
        let Some(theirs) = crate::test_ci::directory_of_nobody(scratch.path()) else {
            return;
        };
        let refused = refuse_others_directory(&theirs.join("r.ttrec"))
            .unwrap_err()
            .0;
        assert!(
            refused.starts_with("not recording as root into "),
            "{refused}"
        );
        assert!(refused.contains("belongs to another user"), "{refused}");
        assert!(refuse_others_directory(&scratch.path().join("r.ttrec")).is_ok());
    }

    /// A review: the check looked only at the resolved path, so a symlink in a directory of
    /// uid 65534 leading to one of root's passed, and the writes went through the symlink,
    /// which that user could point elsewhere between them.
    #[test]
    fn root_does_not_record_through_another_users_symlink() {
        let scratch = tempfile::tempdir().unwrap();
        let Some(theirs) = crate::test_ci::directory_of_nobody(scratch.path()) else {
            return;
        };
        let roots = scratch.path().join("roots");
        std::fs::create_dir(&roots).unwrap();
        let link = theirs.join("link");
        std::os::unix::fs::symlink(&roots, &link).unwrap();
        let refused = refuse_others_directory(&link.join("r.ttrec"))
            .unwrap_err()
            .0;
        assert!(
            refused.contains("theirs belongs to another user"),
            "{refused}"
        );
        // Root's own symlink, in root's directory, to root's directory is fine.
        let own_link = scratch.path().join("own-link");
        std::os::unix::fs::symlink(&roots, &own_link).unwrap();
        assert!(refuse_others_directory(&own_link.join("r.ttrec")).is_ok());
    }

    /// A review: a missing directory was refused as if it were another user's, a directory
    /// as "not a torchtop recording".
    #[test]
    fn a_directory_or_a_missing_one_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let refused = refuse_unusable_path(dir.path()).unwrap_err().0;
        assert!(refused.ends_with("/torchtop.ttrec"), "{refused}");
        assert!(refused.contains(" is a directory: -o names"), "{refused}");
        let missing = dir.path().join("nope").join("r.ttrec");
        let refused = refuse_unusable_path(&missing).unwrap_err().0;
        assert!(refused.contains("nope does not exist"), "{refused}");
        assert!(refuse_unusable_path(&dir.path().join("r.ttrec")).is_ok());
    }

    /// A review: `-o` naming a symlink was refused as "not a torchtop recording".
    #[test]
    fn a_symlink_in_the_way_is_named_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("r.ttrec");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
        let refused = rotate(&link, None).unwrap_err().0;
        assert!(refused.contains("is a symbolic link"), "{refused}");
        std::fs::write(dir.path().join("plain"), b"notes").unwrap();
        let refused = rotate(&dir.path().join("plain"), None).unwrap_err().0;
        assert!(refused.contains("is not a torchtop recording"), "{refused}");
    }
}
