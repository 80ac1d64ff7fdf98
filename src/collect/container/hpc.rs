//! The containers of the HPC runtimes: Apptainer (formerly Singularity) and NVIDIA's enroot
//! (under Slurm, through the pyxis plugin). Neither makes a cgroup of its own (a task stays in
//! its Slurm job's cgroup, which processes outside the container share) nor, by default, a PID
//! namespace, so [`super::classify_path`] cannot see them: they are named per process here.
//!
//! - Apptainer sets APPTAINER_CONTAINER (the image's path) and APPTAINER_NAME (its file name)
//!   in the container's environment; Singularity, and Apptainer for compatibility, set
//!   SINGULARITY_CONTAINER and SINGULARITY_NAME. Every such container's root holds
//!   `/.singularity.d`, which names the runtime where the environment does not.
//! - enroot sets no variable. As `enroot list --fancy` does, a process is in one when its root
//!   holds the file `/.lock`, and the container is named after its root directory: the root
//!   field of the `/` mount in /proc/PID/mountinfo (`/var/lib/enroot/data/pyxis_42_train`).
//!
//! A root's marker counts only for a process in another mount namespace than the host's (pid
//! 1's; torchtop's own where pid 1's cannot be read, as for a user other than root): a `/.lock`
//! on the host's own root is not a container. Files in the process's root are opened through
//! `openat2(RESOLVE_IN_ROOT)` ([`super::open_in_root`]), so a symlink in another user's tree
//! never leads onto the host's files; they are only `fstat`ed.
//!
//! The environment is the process's own word, text any user controls: its values are cut to a
//! bound when read and rid of control characters here, before anything shows them.

use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, SFlag};

use super::{open_in_root, MOUNTINFO_BYTES};
use crate::model::{ContainerVars, LaunchEnv, ProcessContainer};
use crate::sys::cgroup as cg;
use crate::sys::proc as procfs;

/// The most characters kept of a container's name (a file name is at most 255 bytes).
const NAME_CHARS: usize = 255;
/// The most characters kept of its path.
const PATH_CHARS: usize = ContainerVars::MOST_BYTES;

/// The mount namespace a process must differ from for its root's markers to count: pid 1's,
/// else torchtop's own. Read once: neither changes while torchtop runs.
pub(crate) fn host_mount_namespace(proc_root: &Path) -> Option<u64> {
    procfs::read_mount_namespace(proc_root, 1)
        .or_else(|| procfs::read_self_mount_namespace(proc_root))
}

/// The Apptainer or enroot container of process `pid`, from its environment and, unless its
/// cgroup already names a container or pod (`cgroup_names_one`: that name is the better one,
/// and a `/.lock` some image happens to hold is no enroot), from its root.
pub(crate) fn of_process(
    proc_root: &Path,
    pid: u32,
    env: Option<&LaunchEnv>,
    host_mount_ns: Option<u64>,
    cgroup_names_one: bool,
) -> Option<ProcessContainer> {
    if let Some(found) = env.and_then(|env| from_environment(&env.container_vars)) {
        return Some(found);
    }
    if cgroup_names_one {
        return None;
    }
    let own = procfs::read_mount_namespace(proc_root, pid)?;
    if host_mount_ns.is_none_or(|host| host == own) {
        return None;
    }
    let pid_dir = procfs::pid_dir(proc_root, pid);
    if holds(&pid_dir, ".lock", SFlag::S_IFREG) {
        let root = cg::read_small_bounded(&pid_dir.join("mountinfo"), MOUNTINFO_BYTES)
            .and_then(|mountinfo| root_of_root_mount(&mountinfo))
            .filter(|root| root != "/");
        return Some(ProcessContainer {
            runtime: "enroot".to_string(),
            name: root.as_deref().and_then(base_name),
            path: root.as_deref().and_then(|r| clean(r, PATH_CHARS)),
        });
    }
    holds(&pid_dir, ".singularity.d", SFlag::S_IFDIR).then(|| ProcessContainer {
        runtime: "apptainer".to_string(),
        name: None,
        path: None,
    })
}

/// An Apptainer container from the variables it sets: `apptainer` where an APPTAINER_ one is
/// there, else `singularity`; named by APPTAINER_NAME, else the image path's file name, then
/// the same of SINGULARITY_*.
pub(crate) fn from_environment(vars: &ContainerVars) -> Option<ProcessContainer> {
    let runtime = if vars.apptainer_container.is_some() || vars.apptainer_name.is_some() {
        "apptainer"
    } else if vars.singularity_container.is_some() || vars.singularity_name.is_some() {
        "singularity"
    } else {
        return None;
    };
    let name = [
        vars.apptainer_name
            .as_deref()
            .and_then(|n| clean(n, NAME_CHARS)),
        vars.apptainer_container.as_deref().and_then(base_name),
        vars.singularity_name
            .as_deref()
            .and_then(|n| clean(n, NAME_CHARS)),
        vars.singularity_container.as_deref().and_then(base_name),
    ];
    let path = (vars.apptainer_container.as_deref())
        .and_then(|p| clean(p, PATH_CHARS))
        .or_else(|| (vars.singularity_container.as_deref()).and_then(|p| clean(p, PATH_CHARS)));
    Some(ProcessContainer {
        runtime: runtime.to_string(),
        name: name.into_iter().flatten().next(),
        path,
    })
}

/// The HPC runtime torchtop itself runs in: `apptainer` or `singularity` from its own
/// environment (or `apptainer` from `/.singularity.d`, which both make), `enroot` for a `/.lock`
/// at its root in a mount namespace of its own. Without a PID namespace (the default of both)
/// the driver's pids are this /proc's, so nothing else changes inside one.
///
/// What the enroot test misses, or takes wrongly: a container whose root is not enroot's (a
/// `/.lock` an image holds, under another runtime), and a host whose root holds a `/.lock` when
/// torchtop runs in a mount namespace of its own (a systemd unit with `PrivateTmp=`). Where pid
/// 1's namespace cannot be read (any user but root), a user namespace stands in for the mount
/// namespace: unprivileged enroot always makes one, enroot as root need not.
pub(crate) fn own_runtime(fs_root: &Path, proc_root: &Path) -> Option<&'static str> {
    if let Ok(environ) = procfs::read_bytes(&proc_root.join("self/environ")) {
        let set = |name| procfs::environ_lookup(&environ, name).is_some();
        if set("APPTAINER_CONTAINER") || set("APPTAINER_NAME") {
            return Some("apptainer");
        }
        if set("SINGULARITY_CONTAINER") || set("SINGULARITY_NAME") {
            return Some("singularity");
        }
    }
    let kind = |name: &str| std::fs::symlink_metadata(fs_root.join(name)).ok();
    if kind(".singularity.d").is_some_and(|m| m.is_dir()) {
        return Some("apptainer");
    }
    if !kind(".lock").is_some_and(|m| m.is_file()) {
        return None;
    }
    let apart = match (
        procfs::read_self_mount_namespace(proc_root),
        procfs::read_mount_namespace(proc_root, 1),
    ) {
        (Some(own), Some(host)) => own != host,
        _ => in_user_namespace(proc_root),
    };
    apart.then_some("enroot")
}

/// Whether torchtop runs in a user namespace below the initial one, whose uid_map maps every
/// uid to itself.
fn in_user_namespace(proc_root: &Path) -> bool {
    cg::read_small(&proc_root.join("self/uid_map")).is_some_and(|map| {
        let words: Vec<&str> = map.split_whitespace().collect();
        words != ["0", "0", "4294967295"]
    })
}

/// Whether the process's root holds `name` as a file of `kind` itself (not a link to one).
fn holds(pid_dir: &Path, name: &str, kind: SFlag) -> bool {
    let Some(fd) = open_in_root(pid_dir, name, OFlag::O_PATH | OFlag::O_NOFOLLOW) else {
        return false;
    };
    fstat(&fd).is_ok_and(|stat| SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == kind)
}

/// The root field (the 4th) of the last mount on `/` in a mountinfo, its octal escapes (`\040`
/// for a space) undone: the directory of its file system that the process sees as `/`.
fn root_of_root_mount(mountinfo: &str) -> Option<String> {
    let root = mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let root = fields.nth(3)?;
            (fields.next()? == "/").then_some(root)
        })
        .next_back()?;
    // A directory removed while mounted reads "PATH//deleted".
    let root = root.strip_suffix("//deleted").unwrap_or(root);
    Some(unescape_octal(root))
}

/// Undoes the kernel's `\ooo` escapes of a mountinfo field.
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escape = bytes.get(at + 1..at + 4).filter(|digits| {
            bytes[at] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d))
        });
        match escape.map(|d| d.iter().fold(0u32, |n, d| n * 8 + u32::from(d - b'0'))) {
            Some(value) if value <= 0xff => {
                out.push(value as u8);
                at += 4;
            }
            _ => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The last component of a path, cleaned ([`clean`]); `None` for `/` or an empty one.
fn base_name(path: &str) -> Option<String> {
    let last = path.rsplit('/').find(|c| !c.is_empty())?;
    clean(last, NAME_CHARS)
}

/// `text` without control characters (escape sequences, newlines), cut to `most` characters;
/// `None` where nothing but blanks is left.
fn clean(text: &str, most: usize) -> Option<String> {
    let kept: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(most)
        .collect();
    (!kept.trim().is_empty()).then_some(kept)
}

#[cfg(test)]
#[path = "hpc_tests.rs"]
mod tests;
