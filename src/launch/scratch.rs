//! The files of one `torchtop attach`: a directory torchtop creates fresh for the call (in a
//! trusted temporary directory), the result file the target reports into, and the start script
//! for gdb or `sys.remote_exec`. All of it is removed when the attach ends, whatever happened.
//!
//! When the target belongs to another user (root attaching), the directory is 0711: the target
//! can open the files by name but list nothing and create nothing. The result file is created
//! by torchtop (`O_EXCL`, 0600) and only then handed to the target's uid, so the target can
//! write it and nobody else can.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::trusted::{FreshDir, TrustedDir};
use crate::sys::effective_uid;

/// The most read back from a result file (the target writes it; one short JSON line).
const RESULT_LIMIT: usize = 64 << 10;

/// One attach's scratch directory and result file.
pub(crate) struct Scratch {
    dir: FreshDir,
    result: File,
}

/// What the start code reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Started(PathBuf),
    Failed(String),
}

impl Scratch {
    /// Creates the directory under `base` (or the temporary directory, else /tmp) and the
    /// result file, writable by `target_uid`.
    pub(crate) fn create(base: Option<&Path>, target_uid: u32) -> Result<Scratch, String> {
        let for_other = target_uid != effective_uid();
        let bases: Vec<PathBuf> = match base {
            Some(base) => vec![base.to_path_buf()],
            None => vec![std::env::temp_dir(), PathBuf::from("/tmp")],
        };
        let mut problems = Vec::new();
        for base in bases {
            match TrustedDir::open(&base, false) {
                Ok(dir) if for_other && !dir.others_can_search() => problems.push(format!(
                    "process of uid {target_uid} could not reach files in {}.",
                    base.display()
                )),
                Ok(dir) => return Scratch::create_in(&dir, for_other.then_some(target_uid)),
                Err(e) => problems.push(e),
            }
        }
        Err(format!(
            "torchtop found no safe place for the attach files: {}",
            problems.join(" ")
        ))
    }

    fn create_in(base: &TrustedDir, hand_to: Option<u32>) -> Result<Scratch, String> {
        let dir = base.fresh_dir(
            "torchtop-attach-",
            if hand_to.is_some() { 0o711 } else { 0o700 },
        )?;
        let result = dir.dir().create_file("result", 0o600)?;
        if let Some(uid) = hand_to {
            // A file created in this call, through its own descriptor: nothing else changes hands.
            nix::unistd::fchown(&result, Some(nix::unistd::Uid::from_raw(uid)), None)
                .map_err(|e| format!("Cannot give the result file to uid {uid}: {}.", e.desc()))?;
        }
        Ok(Scratch { dir, result })
    }

    pub(crate) fn dir(&self) -> &TrustedDir {
        self.dir.dir()
    }

    pub(crate) fn result_path(&self) -> PathBuf {
        self.dir().path().join("result")
    }

    /// Writes the start code as `attach.py`, readable by the target (0644), and returns its path.
    pub(crate) fn write_script(&self, code: &str) -> Result<PathBuf, String> {
        self.dir()
            .ensure_file("attach.py", code.as_bytes(), 0o644)?;
        Ok(self.dir().path().join("attach.py"))
    }

    /// The reported outcome, once the target has written a whole line.
    pub(crate) fn outcome(&self) -> Option<Outcome> {
        let mut buf = vec![0u8; RESULT_LIMIT];
        let len = self.result.read_at(&mut buf, 0).ok()?;
        parse_outcome(&buf[..len])
    }
}

fn parse_outcome(bytes: &[u8]) -> Option<Outcome> {
    let line = bytes.strip_suffix(b"\n")?;
    let report: Value = serde_json::from_slice(line).ok()?;
    if let Some(path) = report.get("path").and_then(Value::as_str) {
        return Some(Outcome::Started(PathBuf::from(path)));
    }
    let error = report
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("it gave no reason");
    Some(Outcome::Failed(error.chars().take(2000).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn outcomes_need_a_whole_line() {
        assert_eq!(parse_outcome(b""), None);
        assert_eq!(parse_outcome(br#"{"path": "/a/1.sock", "err"#), None);
        assert_eq!(
            parse_outcome(b"{\"path\": \"/a/1.sock\", \"error\": null}\n"),
            Some(Outcome::Started(PathBuf::from("/a/1.sock")))
        );
        assert_eq!(
            parse_outcome(b"{\"path\": null, \"error\": \"no\"}\n"),
            Some(Outcome::Failed("no".to_string()))
        );
        assert_eq!(
            parse_outcome(b"[1]\n"),
            Some(Outcome::Failed("it gave no reason".to_string()))
        );
    }

    #[test]
    fn scratch_is_private_and_goes_away() {
        let temp = tempfile::tempdir().unwrap();
        let scratch = Scratch::create(Some(temp.path()), effective_uid()).unwrap();
        let dir = scratch.dir().path().to_path_buf();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let script = scratch.write_script("print(1)").unwrap();
        assert_eq!(std::fs::metadata(&script).unwrap().mode() & 0o777, 0o644);
        assert_eq!(scratch.outcome(), None);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(scratch.result_path())
            .unwrap();
        f.write_all(b"{\"path\": null, \"error\": \"x\"}\n")
            .unwrap();
        assert_eq!(scratch.outcome(), Some(Outcome::Failed("x".to_string())));
        drop(scratch);
        assert!(!dir.exists());
        assert_eq!(std::fs::read_dir(temp.path()).unwrap().count(), 0);
    }

    #[test]
    fn for_another_user_the_dir_is_0711_and_the_result_theirs() {
        if effective_uid() != 0 {
            println!("skipped: only root can hand a file to another uid");
            return;
        }
        let temp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            temp.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let scratch = Scratch::create(Some(temp.path()), 65534).unwrap();
        let dir = scratch.dir().path();
        let dir_meta = std::fs::metadata(dir).unwrap();
        assert_eq!((dir_meta.uid(), dir_meta.mode() & 0o777), (0, 0o711));
        let result = std::fs::metadata(scratch.result_path()).unwrap();
        assert_eq!((result.uid(), result.mode() & 0o777), (65534, 0o600));
    }
}
