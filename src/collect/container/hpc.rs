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
//!   That field is the directory within its file system, not a host path: a rootfs on a file
//!   system of its own (`/dev/shm`, `/raid`) reads without that mount point. The name is right
//!   either way; the path is given as read ([`crate::model::ProcessContainer::path`]).
//!
//! Both runtimes give the container a mount namespace and a root of its own, so nothing here
//! counts for a process that shares either with the host ([`HostRefs`]): not the variables
//! (Slurm's `--export=ALL` passes them from an `apptainer shell` to the host tasks `srun`
//! starts), nor a `/.lock` seen through a private mount namespace over the host's own root
//! (`unshare -m`, a systemd unit's `PrivateTmp=`). Where the host's namespace or root cannot
//! be read, nothing is said rather than a guess. Files in the process's root are opened
//! through `openat2(RESOLVE_IN_ROOT)` ([`super::open_in_root`]), so a symlink in another
//! user's tree never leads onto the host's files; they are only `fstat`ed.
//!
//! The environment and the markers are the process's own word (any user can make a directory
//! holding `.lock` and chroot into it in a user namespace): its values are cut to a bound when
//! read and rid here of what [`crate::format::escape`] would escape (control characters, bidi
//! controls), before anything shows them.

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

/// What a process is compared with to tell whether it shares the host's files: pid 1's mount
/// namespace and root, read once (neither changes while torchtop runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct HostRefs {
    /// Pid 1's mount namespace; torchtop's own where that cannot be read (any user but root).
    pub(crate) mount_ns: Option<u64>,
    /// (st_dev, st_ino) of pid 1's root; of `fs_root`, torchtop's own, where that cannot be
    /// read.
    pub(crate) root: Option<(u64, u64)>,
}

impl HostRefs {
    pub(crate) fn read(proc_root: &Path, fs_root: &Path) -> HostRefs {
        HostRefs {
            mount_ns: procfs::read_mount_namespace(proc_root, 1)
                .or_else(|| procfs::read_self_mount_namespace(proc_root)),
            root: dir_id(&procfs::pid_dir(proc_root, 1).join("root")).or_else(|| dir_id(fs_root)),
        }
    }

    /// Whether the process of `pid_dir`, in mount namespace `own_ns`, has both a mount
    /// namespace and a root other than the host's; false where any of them is unknown.
    fn apart(&self, own_ns: Option<u64>, pid_dir: &Path) -> bool {
        differ(own_ns, self.mount_ns) && differ(dir_id(&pid_dir.join("root")), self.root)
    }
}

/// Whether both are known and not the same.
fn differ<T: PartialEq>(own: Option<T>, host: Option<T>) -> bool {
    own.zip(host).is_some_and(|(own, host)| own != host)
}

/// (st_dev, st_ino) of the directory at `path`; `stat` follows /proc/PID/root to the
/// process's root.
fn dir_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The Apptainer or enroot container of process `pid`, from its environment and, unless its
/// cgroup already names a container or pod (`cgroup_names_one`: that name is the better one,
/// and a `/.lock` some image happens to hold is no enroot), from its root. `env` is the
/// process's as the host collector read it, with its mount namespace.
pub(crate) fn of_process(
    proc_root: &Path,
    pid: u32,
    env: Option<&LaunchEnv>,
    host: &HostRefs,
    cgroup_names_one: bool,
) -> Option<ProcessContainer> {
    let pid_dir = procfs::pid_dir(proc_root, pid);
    // The host collector read the namespace with environ; without environ, read it here.
    let own_ns = match env {
        Some(env) => env.agent_dir_vars.mount_ns,
        None => procfs::read_mount_namespace(proc_root, pid),
    };
    let apart = host.apart(own_ns, &pid_dir);
    if let Some(found) = env.and_then(|env| from_environment(&env.container_vars)) {
        // `/.singularity.d` stands in where the host's namespace is torchtop's own and torchtop
        // runs in the same container.
        let inside = apart || holds(&pid_dir, ".singularity.d", SFlag::S_IFDIR);
        return inside.then_some(found);
    }
    if cgroup_names_one || !apart {
        return None;
    }
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
/// environment where `/.singularity.d` (which both make) is at its root or torchtop is apart
/// from the host (a mount namespace and a root of its own, as for a process); `apptainer` from
/// `/.singularity.d` alone; `enroot` for a `/.lock` at its root, apart from the host. Without a
/// PID namespace (the default of both) the driver's pids are this /proc's, so nothing else
/// changes inside one.
///
/// What the enroot test misses, or takes wrongly: a container whose root is not enroot's (a
/// `/.lock` an image holds, under another runtime). Where pid 1's namespace cannot be read (any
/// user but root), a user namespace stands in for being apart: unprivileged enroot always makes
/// one, enroot as root need not.
pub(crate) fn own_runtime(fs_root: &Path, proc_root: &Path) -> Option<&'static str> {
    let kind = |name: &str| std::fs::symlink_metadata(fs_root.join(name)).ok();
    let singularity_d = kind(".singularity.d").is_some_and(|m| m.is_dir());
    let apart = || match (
        procfs::read_self_mount_namespace(proc_root),
        procfs::read_mount_namespace(proc_root, 1),
    ) {
        (Some(own), Some(host)) => {
            let host_root = dir_id(&procfs::pid_dir(proc_root, 1).join("root"));
            own != host && differ(dir_id(fs_root), host_root)
        }
        _ => in_user_namespace(proc_root),
    };
    if let Ok(environ) = procfs::read_bytes(&proc_root.join("self/environ")) {
        let set = |name| procfs::environ_lookup(&environ, name).is_some();
        let runtime = if set("APPTAINER_CONTAINER") || set("APPTAINER_NAME") {
            Some("apptainer")
        } else if set("SINGULARITY_CONTAINER") || set("SINGULARITY_NAME") {
            Some("singularity")
        } else {
            None
        };
        // Passed on to a host process (`srun --export=ALL`), they name no container.
        if runtime.is_some() && (singularity_d || apart()) {
            return runtime;
        }
    }
    if singularity_d {
        return Some("apptainer");
    }
    (kind(".lock").is_some_and(|m| m.is_file()) && apart()).then_some("enroot")
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

/// `text` without what [`crate::format::escape`] would escape (control characters, escape
/// sequences, newlines, bidi controls), cut to `most` characters; `None` where nothing but
/// blanks is left.
fn clean(text: &str, most: usize) -> Option<String> {
    let kept: String = text
        .chars()
        .filter(|&c| !crate::format::needs_escape(c))
        .take(most)
        .collect();
    (!kept.trim().is_empty()).then_some(kept)
}

#[cfg(test)]
#[path = "hpc_tests.rs"]
pub(crate) mod tests;
