//! Paths below the proc root (`/proc/PID/task/TID/children`, `/proc/PID/cgroup`) built in one
//! buffer reused from path to path: the files read again every few seconds for each GPU
//! process cost no allocation for their names.

use std::path::{Path, PathBuf};

/// A path buffer, cleared and refilled for each file.
#[derive(Debug, Default)]
pub(crate) struct ProcPath(PathBuf);

impl ProcPath {
    /// Starts the path `root/PID`.
    pub(crate) fn pid(&mut self, root: &Path, pid: u32) -> &mut Self {
        self.0.as_mut_os_string().clear();
        self.0.push(root);
        self.number(pid)
    }

    /// Adds a component.
    pub(crate) fn name(&mut self, name: &str) -> &mut Self {
        self.0.push(name);
        self
    }

    /// Adds a number as a component, written without an allocation.
    pub(crate) fn number(&mut self, n: u32) -> &mut Self {
        let mut digits = [0u8; 10];
        let mut at = digits.len();
        let mut rest = n;
        loop {
            at -= 1;
            // The remainder is below 10: a digit.
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        // Only ASCII digits were written.
        self.0
            .push(std::str::from_utf8(&digits[at..]).unwrap_or_default());
        self
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_built_in_place() {
        let mut path = ProcPath::default();
        let root = Path::new("/proc");
        path.pid(root, 4242).name("task").number(0).name("children");
        assert_eq!(path.path(), Path::new("/proc/4242/task/0/children"));
        path.pid(root, u32::MAX).name("cgroup");
        assert_eq!(path.path(), Path::new("/proc/4294967295/cgroup"));
    }
}
