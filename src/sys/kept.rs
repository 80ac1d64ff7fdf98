//! Files read every refresh, kept open and read again with one `pread` at offset 0: opening a
//! /proc or cgroup file costs a path walk, an open and a close each time, where a kept one
//! costs one system call. The kernel's files (proc, sysfs, cgroup) generate their text anew
//! at each read from offset 0, and one whose object went away (a removed cgroup, an exited
//! process) reads as an error, after which the path is opened again.
//!
//! Elsewhere (the fixture trees of the tests) a file can be replaced at its path while the
//! old one stays open, so there each read first checks with `fstat` that the kept file still
//! has a name, and opens the path again when it has none.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::statfs::SYSFS_MAGIC;
use nix::sys::statfs::{fstatfs, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC, PROC_SUPER_MAGIC};

/// How much a read buffer holds at first; it grows (and stays grown) for bigger files.
const FIRST_BUFFER_BYTES: usize = 4096;

/// One file kept open between reads.
#[derive(Debug)]
pub(crate) struct KeptFile {
    path: PathBuf,
    open: Option<Open>,
    /// When the path last failed to open, for [`KeptFile::read_retrying`].
    failed_at: Option<Instant>,
}

#[derive(Debug)]
struct Open {
    file: File,
    /// Not on a kernel file system: the link count is checked before each read.
    check_links: bool,
}

impl KeptFile {
    pub(crate) fn new(path: PathBuf) -> Self {
        KeptFile {
            path,
            open: None,
            failed_at: None,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file (at most `limit` bytes) in `buffer`, which is reused from call to call.
    /// The file is opened on first use, and again when the kept one fails to read.
    pub(crate) fn read<'b>(
        &mut self,
        buffer: &'b mut Vec<u8>,
        limit: usize,
    ) -> io::Result<&'b [u8]> {
        if let Some(open) = &self.open {
            if let Some(n) = open.read(buffer, limit) {
                return Ok(&buffer[..n]);
            }
            self.open = None;
        }
        let open = Open::at(&self.path).inspect_err(|_| self.failed_at = Some(Instant::now()))?;
        self.failed_at = None;
        let n = open
            .read(buffer, limit)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
        self.open = Some(open);
        Ok(&buffer[..n])
    }

    /// As [`KeptFile::read`], but a path that failed to open is tried again only once `retry`
    /// has passed since: optional files that are not there (a cgroup controller not enabled, an
    /// old kernel) mostly stay so, and each try is a path walk.
    pub(crate) fn read_retrying<'b>(
        &mut self,
        buffer: &'b mut Vec<u8>,
        limit: usize,
        now: Instant,
        retry: Duration,
    ) -> io::Result<&'b [u8]> {
        if let Some(at) = self.failed_at {
            if now.saturating_duration_since(at) < retry {
                return Err(io::ErrorKind::NotFound.into());
            }
        }
        self.read(buffer, limit)
    }

    /// Closes the file; the next read opens it again.
    pub(crate) fn close(&mut self) {
        self.open = None;
    }

    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        self.open.is_some()
    }
}

impl Open {
    /// Opens `path` for reading, not through a symlink at its end (cgroup paths are named by
    /// users with delegated subtrees), without blocking on a FIFO put in a file's place.
    fn at(path: &Path) -> io::Result<Open> {
        let file = Open::file(path)?;
        let kernel = fstatfs(&file).is_ok_and(|fs| {
            let kind = fs.filesystem_type();
            [
                PROC_SUPER_MAGIC,
                SYSFS_MAGIC,
                CGROUP_SUPER_MAGIC,
                CGROUP2_SUPER_MAGIC,
            ]
            .contains(&kind)
        });
        Ok(Open {
            file,
            check_links: !kernel,
        })
    }

    fn file(path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)
    }

    /// The bytes read into `buffer` from offset 0; `None` when the file failed to read or
    /// (outside the kernel's file systems) was removed or replaced at its path.
    fn read(&self, buffer: &mut Vec<u8>, limit: usize) -> Option<usize> {
        if self.check_links && nix::sys::stat::fstat(&self.file).ok()?.st_nlink == 0 {
            return None;
        }
        let limit = limit.max(1);
        if buffer.is_empty() {
            buffer.resize(FIRST_BUFFER_BYTES, 0);
        }
        let mut filled = 0;
        loop {
            let want = buffer.len().min(limit);
            let n = self.read_at(&mut buffer[filled..want], filled)?;
            filled += n;
            if filled >= limit || n == 0 {
                return Some(filled);
            }
            if filled == want {
                // Full: more may be there. Read it all again into a bigger buffer (kept for
                // next time), rather than on from here: a file generated anew at each read
                // may have changed length, and the pieces would not join.
                buffer.resize(buffer.len() * 2, 0);
                filled = 0;
            } else if !may_stop_at_a_page(filled) {
                return Some(filled);
            }
        }
    }

    fn read_at(&self, into: &mut [u8], offset: usize) -> Option<usize> {
        loop {
            match self.file.read_at(into, offset as u64) {
                Ok(n) => return Some(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }
}

/// Whether a read that ended at `end`, short of the buffer, may still not be the whole file.
/// The kernel's line-by-line files (/proc/vmstat, maps) hand out at most a page a read, ending
/// at the last whole line that fits: such a read ends within a line of a page's end, and the
/// rest comes from reading on at `end`, where a line starts. Any other short read is the end.
fn may_stop_at_a_page(end: usize) -> bool {
    end % PAGE_BYTES > PAGE_BYTES - LONGEST_LINE_BYTES
}

/// The page a line-by-line kernel file is read by (a multiple of it on bigger-page machines,
/// whose page ends are also 4 KiB ends).
const PAGE_BYTES: usize = 4096;

/// Longer than any line of the line-by-line kernel files read through [`KeptFile`].
const LONGEST_LINE_BYTES: usize = 256;

/// Reads a file read now and then (not kept open) into `buffer`, reused from call to call:
/// open, one read (more only when the buffer fills), close.
pub(crate) fn read_once<'b>(
    path: &Path,
    buffer: &'b mut Vec<u8>,
    limit: usize,
) -> io::Result<&'b [u8]> {
    let open = Open {
        file: Open::file(path)?,
        check_links: false,
    };
    let n = open
        .read(buffer, limit)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    Ok(&buffer[..n])
}

/// `bytes` as text: borrowed when it is UTF-8 (as the kernel's files are), else with the odd
/// bytes replaced.
pub(crate) fn as_text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_file_reads_new_text_and_follows_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "one\n").unwrap();
        let mut kept = KeptFile::new(path.clone());
        let mut buffer = Vec::new();
        assert_eq!(kept.read(&mut buffer, 1 << 20).unwrap(), b"one\n");
        // Rewritten in place: the open file shows the new text.
        std::fs::write(&path, "two\n").unwrap();
        assert_eq!(kept.read(&mut buffer, 1 << 20).unwrap(), b"two\n");
        // Replaced by another file: the path is opened again.
        let other = dir.path().join("g");
        std::fs::write(&other, "three\n").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(kept.read(&mut buffer, 1 << 20).unwrap(), b"three\n");
        // Removed: an error, no stale text.
        std::fs::remove_file(&path).unwrap();
        assert!(kept.read(&mut buffer, 1 << 20).is_err());
        assert!(!kept.is_open());
    }

    #[test]
    fn big_files_grow_the_buffer_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let text = "x".repeat(10_000);
        std::fs::write(&path, &text).unwrap();
        let mut kept = KeptFile::new(path);
        let mut buffer = Vec::new();
        assert_eq!(kept.read(&mut buffer, 1 << 20).unwrap().len(), 10_000);
        assert_eq!(kept.read(&mut buffer, 6000).unwrap().len(), 6000);
    }

    #[test]
    fn a_line_by_line_kernel_file_is_read_whole() {
        // /proc/vmstat is read a line at a time: a read into 1,000 bytes stops at the line
        // that does not fit, short of the buffer's end, and is not the whole file.
        let mut kept = KeptFile::new(PathBuf::from("/proc/vmstat"));
        let mut buffer = vec![0; 1000];
        let names = |bytes: &[u8]| -> Vec<String> {
            as_text(bytes)
                .lines()
                .filter_map(|line| line.split_whitespace().next().map(String::from))
                .collect()
        };
        let kept_names = names(kept.read(&mut buffer, 1 << 20).unwrap());
        let whole = names(&std::fs::read("/proc/vmstat").unwrap());
        assert!(whole.len() > 60, "{} lines in /proc/vmstat", whole.len());
        assert_eq!(kept_names, whole);
    }

    #[test]
    fn kernel_files_are_read_again_in_place() {
        let mut kept = KeptFile::new(PathBuf::from("/proc/self/stat"));
        let mut buffer = Vec::new();
        let first = kept.read(&mut buffer, 1 << 20).unwrap().to_vec();
        assert!(!kept.open.as_ref().unwrap().check_links);
        let again = kept.read(&mut buffer, 1 << 20).unwrap();
        assert_eq!(
            first.split(|b| *b == b' ').next(),
            again.split(|b| *b == b' ').next()
        );
    }
}
