//! A process's direct children, from the `children` file of each of its threads
//! (`/proc/PID/task/TID/children`), read with buffers kept from walk to walk: a walk allocates
//! nothing once the buffers have grown (the thread list is read with `getdents64` into a kept
//! buffer, where `std::fs::read_dir` and `opendir` take a buffer per directory and copy each
//! name).

use std::mem::MaybeUninit;
use std::path::Path;

use rustix::fs::{Mode, OFlags, RawDir};

use crate::collect::proc_path::ProcPath;
use crate::sys::kept;

/// The most read of one thread's `children` file (a pid and a space each: 100,000 children).
const CHILDREN_FILE_BYTES: usize = 1 << 20;

/// The room for directory entries read at once (a thread's entry takes about 24 bytes).
const DIRENT_BYTES: usize = 4096;

/// The buffers of the walks.
#[derive(Debug, Default)]
pub(super) struct ChildWalker {
    path: ProcPath,
    threads: Vec<u32>,
    buffer: Vec<u8>,
    dirents: Vec<MaybeUninit<u8>>,
}

impl ChildWalker {
    /// Fills `children` (cleared first) with the direct children of `pid`, and says whether
    /// any thread's file could be read (false: the kernel has no such files); `None` when its
    /// threads cannot be listed (the process is gone).
    pub(super) fn walk(&mut self, root: &Path, pid: u32, children: &mut Vec<u32>) -> Option<bool> {
        children.clear();
        let task = self.path.pid(root, pid).name("task").path();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = rustix::fs::open(task, flags, Mode::empty()).ok()?;
        self.threads.clear();
        self.dirents.resize(DIRENT_BYTES, MaybeUninit::uninit());
        let mut entries = RawDir::new(&dir, &mut self.dirents);
        while let Some(entry) = entries.next() {
            let Ok(entry) = entry else {
                return None;
            };
            let name = entry.file_name().to_str().ok();
            self.threads
                .extend(name.and_then(|n| n.parse::<u32>().ok()));
        }
        drop(dir);
        let mut any_read = false;
        // Workers are forked by any thread of the process, so every thread's list is read.
        for &tid in &self.threads {
            let path = self.path.pid(root, pid).name("task").number(tid);
            let path = path.name("children").path();
            let Ok(bytes) = kept::read_once(path, &mut self.buffer, CHILDREN_FILE_BYTES) else {
                continue;
            };
            let before = children.len();
            let parsed = std::str::from_utf8(bytes).ok().and_then(|text| {
                let pids = text.split_ascii_whitespace().map(str::parse::<u32>);
                pids.map(|p| p.ok().map(|p| children.push(p)))
                    .collect::<Option<()>>()
            });
            match parsed {
                Some(()) => any_read = true,
                // A garbled file says nothing: as unread.
                None => children.truncate(before),
            }
        }
        Some(any_read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_s_children_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let task = dir.path().join("7/task");
        for (tid, text) in [("7", "8 9 "), ("10", "11\n"), ("12", "x 13")] {
            std::fs::create_dir_all(task.join(tid)).unwrap();
            std::fs::write(task.join(tid).join("children"), text).unwrap();
        }
        let mut walker = ChildWalker::default();
        let mut children = vec![1];
        assert_eq!(walker.walk(dir.path(), 7, &mut children), Some(true));
        children.sort_unstable();
        assert_eq!(children, [8, 9, 11], "the garbled file is left out");
        assert_eq!(walker.walk(dir.path(), 99, &mut children), None);
        assert!(children.is_empty());
    }
}
