//! The /proc files only the detail view reads, for one process while it is open: the cwd link,
//! the chosen environment variables, the cgroup, and the direct children.

use std::path::Path;

use super::pid::{read_thread_children, read_thread_ids};
use super::{pid_dir, read_bytes, read_text, ProcError};
use crate::model::detail::{detail_env_wanted, MAX_DETAIL_ENV, MAX_DETAIL_VALUE_CHARS};

/// The longest cwd kept; the kernel's own limit is PATH_MAX.
const MAX_CWD_BYTES: usize = 4096;

/// Where /proc/PID/cwd points. `readlink` does not follow the link, so a hostile process's
/// directory is never opened.
pub(crate) fn read_cwd(root: &Path, pid: u32) -> Result<String, ProcError> {
    let path = pid_dir(root, pid).join("cwd");
    let target = std::fs::read_link(&path).map_err(|e| ProcError::from_io(&path, e))?;
    let text = target.to_string_lossy();
    Ok(text.chars().take(MAX_CWD_BYTES).collect())
}

/// The variables of /proc/PID/environ the detail view shows ([`detail_env_wanted`]), sorted by
/// name, at most [`MAX_DETAIL_ENV`] of them, each value cut to [`MAX_DETAIL_VALUE_CHARS`].
pub(crate) fn read_detail_env(root: &Path, pid: u32) -> Result<Vec<(String, String)>, ProcError> {
    let bytes = read_bytes(&pid_dir(root, pid).join("environ"))?;
    Ok(parse_detail_env(&bytes))
}

/// [`read_detail_env`] on the bytes of an environ file (NUL-separated `KEY=value`).
pub(crate) fn parse_detail_env(environ: &[u8]) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = environ
        .split(|&b| b == 0)
        .filter_map(|entry| {
            let text = String::from_utf8_lossy(entry);
            let (key, value) = text.split_once('=')?;
            detail_env_wanted(key).then(|| {
                let value: String = value.chars().take(MAX_DETAIL_VALUE_CHARS).collect();
                (key.to_string(), value)
            })
        })
        .take(MAX_DETAIL_ENV)
        .collect();
    found.sort();
    found.dedup_by(|a, b| a.0 == b.0);
    found
}

/// /proc/PID/cgroup: the v2 path (`0::/path`), or every v1 line joined with "; ".
pub(crate) fn read_cgroup(root: &Path, pid: u32) -> Result<String, ProcError> {
    let text = read_text(&pid_dir(root, pid).join("cgroup"))?;
    Ok(parse_cgroup(&text))
}

pub(crate) fn parse_cgroup(text: &str) -> String {
    let mut lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    // A hybrid host lists the v1 hierarchies beside a v2 line that is mostly an empty "/":
    // the process's place is in the v1 lines then.
    if lines.len() > 1 {
        lines.retain(|l| *l != "0::/");
    }
    if let Some(path) = lines.iter().find_map(|l| l.strip_prefix("0::")) {
        return path.chars().take(MAX_DETAIL_VALUE_CHARS).collect();
    }
    let joined = lines.join("; ");
    joined.chars().take(MAX_DETAIL_VALUE_CHARS).collect()
}

/// The direct children of `pid`: the `children` files of all its threads, each pid once.
pub(crate) fn read_children(root: &Path, pid: u32) -> Result<Vec<u32>, ProcError> {
    let mut children = Vec::new();
    for tid in read_thread_ids(root, pid)? {
        if let Ok(found) = read_thread_children(root, pid, tid) {
            children.extend(found);
        }
    }
    children.sort_unstable();
    children.dedup();
    Ok(children)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_launcher_and_cuda_variables_are_kept_and_bounded() {
        let mut environ = b"HOME=/root\0CUDA_VISIBLE_DEVICES=0,3\0RANK=1\0SECRET_TOKEN=x\0\
NCCL_DEBUG=INFO\0PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\0noequals\0"
            .to_vec();
        for i in 0..200 {
            environ.extend_from_slice(format!("TORCH_X{i:03}={}\0", "v".repeat(2000)).as_bytes());
        }
        let env = parse_detail_env(&environ);
        assert_eq!(env.len(), MAX_DETAIL_ENV);
        assert!(env.iter().all(|(k, _)| k != "HOME" && k != "SECRET_TOKEN"));
        assert!(env.contains(&("RANK".to_string(), "1".to_string())));
        assert!(env.contains(&("NCCL_DEBUG".to_string(), "INFO".to_string())));
        assert!(env
            .iter()
            .all(|(_, v)| v.chars().count() <= MAX_DETAIL_VALUE_CHARS));
    }

    #[test]
    fn cgroup_v2_path_or_v1_lines() {
        assert_eq!(
            parse_cgroup("0::/system.slice/train.service\n"),
            "/system.slice/train.service"
        );
        assert_eq!(
            parse_cgroup("12:memory:/docker/abc\n11:cpu:/docker/abc\n"),
            "12:memory:/docker/abc; 11:cpu:/docker/abc"
        );
        // Hybrid: the empty unified line said "/" where the process sits in a Slurm step.
        assert_eq!(
            parse_cgroup("4:memory:/slurm/uid_1000/job_4242/step_0\n0::/\n"),
            "4:memory:/slurm/uid_1000/job_4242/step_0"
        );
    }

    #[test]
    fn reads_this_process_cwd_and_its_own_children() {
        let root = Path::new(super::super::PROC_ROOT);
        let me = std::process::id();
        let cwd = read_cwd(root, me).unwrap();
        assert_eq!(
            cwd,
            std::env::current_dir().unwrap().to_string_lossy().as_ref()
        );
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let children = read_children(root, me).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(children.contains(&child.id()), "{children:?}");
        assert!(read_cgroup(root, me).is_ok());
    }
}
