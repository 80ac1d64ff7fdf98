//! Containers: which container or Kubernetes pod a cgroup path belongs to, whether torchtop
//! itself runs inside one, and a process's `/dev/shm`.
//!
//! Cgroup paths the runtimes make (systemd and cgroupfs drivers):
//! - Docker: `/system.slice/docker-ID.scope`, `/docker/ID`;
//! - containerd and CRI-O under the kubelet: `.../kubepods-QOS-podUID.slice/cri-containerd-ID.scope`,
//!   `.../crio-ID.scope`, `/kubepods/QOS/podUID/ID`;
//! - Podman: `libpod-ID.scope`, `/libpod_parent/libpod-ID`.
//!
//! The HPC runtimes, whose containers have no cgroup of their own (Apptainer, enroot), are
//! named per process in [`hpc`].
//!
//! `/dev/shm` is opened through /proc/PID/root with `openat2(RESOLVE_IN_ROOT)`, so symlinks in
//! the process's tree resolve inside that tree and never onto the host's; only `fstatfs` is
//! done on it. Where that is not a tmpfs (or openat2 is missing, before Linux 5.6), the size
//! comes from the `size=` option of /proc/PID/mountinfo and the use stays unknown.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use nix::sys::statfs::{fstatfs, TMPFS_MAGIC};

use crate::model::{ContainerRef, PodRef, ShmInfo};
use crate::sys::cgroup as cg;
use crate::sys::proc as procfs;

pub(crate) mod hpc;

/// The container and the pod a cgroup path names, each where it names one.
pub(crate) fn classify_path(path: &str) -> (Option<ContainerRef>, Option<PodRef>) {
    let mut container = None;
    let mut pod = None;
    let mut qos = None;
    for component in path.split('/').filter(|c| !c.is_empty()) {
        let name = component.strip_suffix(".scope").unwrap_or(component);
        let name = name.strip_suffix(".slice").unwrap_or(name);
        if let Some(found) = pod_uid(name) {
            pod = Some(found);
        }
        for level in ["besteffort", "burstable"] {
            if name == level || name == format!("kubepods-{level}") {
                qos = Some(level.to_string());
            }
        }
        if let Some(found) = container_id(name) {
            container = Some(found);
        }
    }
    let pod = pod.map(|uid| PodRef {
        uid,
        // A pod directly under kubepods is Guaranteed.
        qos: Some(qos.unwrap_or_else(|| "guaranteed".to_string())),
        name: None,
    });
    let container = container.map(|(runtime, id)| {
        let runtime = match (runtime, &pod) {
            ("", Some(_)) => "kubernetes",
            ("", None) => "docker",
            (named, _) => named,
        };
        ContainerRef {
            runtime: runtime.to_string(),
            id,
        }
    });
    (container, pod)
}

/// `kubepods-burstable-pod1a2b_3c.slice` or `pod1a2b-3c`: the UID with dashes.
fn pod_uid(name: &str) -> Option<String> {
    let at = name.rfind("pod")?;
    let before = &name[..at];
    if !(before.is_empty() || before.starts_with("kubepods")) {
        return None;
    }
    let uid = name[at + 3..].replace('_', "-");
    let valid = uid.len() >= 32 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    valid.then_some(uid)
}

/// A 64-hex-digit container id, with the runtime its prefix names ("" for a bare id).
fn container_id(name: &str) -> Option<(&'static str, String)> {
    let prefixes = [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "cri-o"),
        ("libpod-", "podman"),
        ("", ""),
    ];
    prefixes.iter().find_map(|(prefix, runtime)| {
        let id = name.strip_prefix(prefix)?;
        let hex = id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit());
        hex.then(|| (*runtime, id.to_string()))
    })
}

/// The container torchtop runs in, if any: `/.dockerenv` (Docker), `/run/.containerenv`
/// (Podman), Apptainer or enroot ([`hpc::own_runtime`]), `container=` in pid 1's environment
/// (systemd-nspawn, LXC, Podman), or a container or pod in its own cgroup path (cgroup v1, or
/// v2 without a cgroup namespace); "unknown" for a PID namespace below the host's with none of
/// those.
pub(crate) fn detect_own_container(fs_root: &Path, proc_root: &Path) -> Option<String> {
    if fs_root.join(".dockerenv").exists() {
        return Some("docker".to_string());
    }
    if fs_root.join("run/.containerenv").exists() {
        return Some("podman".to_string());
    }
    // Before pid 1's environment and the cgroup: without a PID namespace those are the host's
    // (or the Slurm job's), which say nothing of the container.
    if let Some(runtime) = hpc::own_runtime(fs_root, proc_root) {
        return Some(runtime.to_string());
    }
    if let Ok(Some(value)) = procfs::read_environ_var(proc_root, 1, "container") {
        let value = value.to_string_lossy();
        let value: String = value
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(32)
            .collect();
        if !value.is_empty() {
            return Some(value);
        }
    }
    let named = cg::read_small(&proc_root.join("self/cgroup"))
        .and_then(|own| cg::parse_proc_cgroup(&own))
        .and_then(|groups| {
            let paths = groups
                .unified
                .iter()
                .chain(groups.v1.iter().map(|(_, p)| p));
            paths
                .map(|p| classify_path(p))
                .find_map(|(container, pod)| match (container, pod) {
                    (_, Some(_)) => Some("kubernetes".to_string()),
                    (Some(c), None) => Some(c.runtime),
                    _ => None,
                })
        });
    // A PID namespace of its own without a runtime's mark (unshare, a sandbox) hides the
    // driver's pids all the same.
    named.or_else(|| procfs::in_nested_pid_namespace(proc_root).then(|| "unknown".to_string()))
}

/// How long a size read from mountinfo is kept: a Kubernetes node's mountinfo can be a MiB,
/// and a mount's size option does not change while it is mounted.
const MOUNTINFO_KEEP: Duration = Duration::from_secs(30);

/// The `/dev/shm` of processes, by mount namespace: a statfs reading for one refresh, a size
/// from mountinfo for [`MOUNTINFO_KEEP`].
pub(crate) struct ShmReader {
    proc_root: PathBuf,
    this_refresh: HashMap<String, Option<ShmInfo>>,
    from_mountinfo: HashMap<String, (Instant, Option<ShmInfo>)>,
}

impl ShmReader {
    pub(crate) fn new(proc_root: PathBuf) -> Self {
        ShmReader {
            proc_root,
            this_refresh: HashMap::new(),
            from_mountinfo: HashMap::new(),
        }
    }

    pub(crate) fn new_refresh(&mut self) {
        self.this_refresh.clear();
        let now = Instant::now();
        self.from_mountinfo
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < MOUNTINFO_KEEP);
    }

    /// The size and use of `pid`'s `/dev/shm`; `None` when neither can be read.
    pub(crate) fn of_process(&mut self, pid: u32) -> Option<ShmInfo> {
        let dir = procfs::pid_dir(&self.proc_root, pid);
        // The namespace link reads "mnt:[4026531840]"; in a fixture tree it may be missing.
        let namespace = std::fs::read_link(dir.join("ns/mnt")).map_or_else(
            |_| format!("pid {pid}"),
            |l| l.to_string_lossy().into_owned(),
        );
        if let Some(known) = self.this_refresh.get(&namespace) {
            return known.clone();
        }
        let found = match statfs_shm(&dir) {
            Some(found) => Some(found),
            None => {
                if let Some((_, kept)) = self.from_mountinfo.get(&namespace) {
                    kept.clone()
                } else {
                    let read = mountinfo_shm(&dir);
                    let kept = (Instant::now(), read.clone());
                    self.from_mountinfo.insert(namespace.clone(), kept);
                    read
                }
            }
        };
        self.this_refresh.insert(namespace, found.clone());
        found
    }
}

/// Size and use from `fstatfs`, when `/dev/shm` is a tmpfs mount of its own.
fn statfs_shm(pid_dir: &Path) -> Option<ShmInfo> {
    if let Some(stats) = open_shm(pid_dir).and_then(|fd| fstatfs(fd).ok()) {
        if stats.filesystem_type() == TMPFS_MAGIC {
            let block = stats.block_size() as u64;
            let total = stats.blocks().saturating_mul(block);
            let free = stats.blocks_free().saturating_mul(block);
            return Some(ShmInfo {
                size_bytes: Some(total),
                used_bytes: Some(total.saturating_sub(free)),
            });
        }
    }
    None
}

/// The size from the `size=` option of `/dev/shm`'s line in /proc/PID/mountinfo.
fn mountinfo_shm(pid_dir: &Path) -> Option<ShmInfo> {
    let mountinfo = cg::read_small_bounded(&pid_dir.join("mountinfo"), MOUNTINFO_BYTES)?;
    let (fstype, size) = cg::parse_shm_mount(&mountinfo)?;
    (fstype == "tmpfs" && size.is_some()).then_some(ShmInfo {
        size_bytes: size,
        used_bytes: None,
    })
}

/// The most of /proc/PID/mountinfo read: a Kubernetes node's can hold thousands of mounts.
const MOUNTINFO_BYTES: u64 = 4 << 20;

/// `/dev/shm` inside the process's root, resolved as the process would, as an `O_PATH` fd;
/// only when it is a mount of its own (its device differs from `/dev`'s), so that a plain
/// directory is never taken for the file system around it.
fn open_shm(pid_dir: &Path) -> Option<OwnedFd> {
    let directory = OFlag::O_PATH | OFlag::O_DIRECTORY;
    let dev = open_in_root(pid_dir, "dev", directory)?;
    let shm = open_in_root(pid_dir, "dev/shm", directory)?;
    let device = |fd: &OwnedFd| nix::sys::stat::fstat(fd).ok().map(|s| s.st_dev);
    (device(&dev)? != device(&shm)?).then_some(shm)
}

/// `path` inside the root of the process whose /proc directory is `pid_dir`, opened with
/// `flags` (and `O_CLOEXEC`) through `openat2(RESOLVE_IN_ROOT)`: its symlinks, absolute ones
/// and `..` included, resolve inside that root and never onto the host's files. `None` where
/// it is missing, refused, or openat2 is (before Linux 5.6).
fn open_in_root(pid_dir: &Path, path: &str, flags: OFlag) -> Option<OwnedFd> {
    let root = nix::fcntl::open(
        &pid_dir.join("root"),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    nix::fcntl::openat2(&root, path, how).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a1b9c0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

    #[test]
    fn docker_and_podman_scopes() {
        let (c, p) = classify_path(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(c.unwrap().runtime, "docker");
        assert_eq!(p, None);
        let (c, _) = classify_path(&format!("/docker/{ID}"));
        assert_eq!(c.unwrap().id, ID);
        let (c, _) = classify_path(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!(c.unwrap().runtime, "podman");
        assert_eq!(
            classify_path("/user.slice/user-1000.slice/session-2.scope"),
            (None, None)
        );
    }

    #[test]
    fn kubelet_paths_name_the_pod_and_its_qos() {
        let systemd = format!(
            "/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod7c1e2d3f_4a5b_6c7d_8e9f_0a1b2c3d4e5f.slice/cri-containerd-{ID}.scope"
        );
        let (c, p) = classify_path(&systemd);
        let p = p.unwrap();
        assert_eq!(p.uid, "7c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f");
        assert_eq!(p.qos.as_deref(), Some("burstable"));
        assert_eq!(c.unwrap().runtime, "containerd");
        let cgroupfs = format!("/kubepods/pod7c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f/{ID}");
        let (c, p) = classify_path(&cgroupfs);
        assert_eq!(p.unwrap().qos.as_deref(), Some("guaranteed"));
        assert_eq!(c.unwrap().runtime, "kubernetes");
        let (_, p) = classify_path("/kubepods/besteffort/podnothex/x");
        assert_eq!(p, None);
    }

    #[test]
    fn own_container_from_marker_files_and_pid_1() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        std::fs::create_dir_all(proc_root.join("1")).unwrap();
        assert_eq!(detect_own_container(dir.path(), &proc_root), None);
        std::fs::write(proc_root.join("1/environ"), "PATH=/bin\0container=lxc\0").unwrap();
        assert_eq!(
            detect_own_container(dir.path(), &proc_root).as_deref(),
            Some("lxc")
        );
        std::fs::write(dir.path().join(".dockerenv"), "").unwrap();
        assert_eq!(
            detect_own_container(dir.path(), &proc_root).as_deref(),
            Some("docker")
        );
    }

    #[test]
    fn shm_size_from_mountinfo_when_not_a_tmpfs_mount() {
        let dir = tempfile::tempdir().unwrap();
        let pid_dir = dir.path().join("42");
        std::fs::create_dir_all(pid_dir.join("root/dev/shm")).unwrap();
        std::fs::write(
            pid_dir.join("mountinfo"),
            "775 771 0:51 / /dev/shm rw,nosuid - tmpfs shm rw,size=65536k\n",
        )
        .unwrap();
        let mut reader = ShmReader::new(dir.path().to_path_buf());
        let shm = reader.of_process(42).unwrap();
        assert_eq!(shm.size_bytes, Some(64 << 20));
        assert_eq!(shm.used_bytes, None);
        assert_eq!(reader.of_process(43), None);
    }

    #[test]
    fn a_symlink_in_the_process_tree_never_leads_onto_the_hosts_shm() {
        // The process's /dev is a link to "/dev": followed from the host it would be the host's
        // /dev, whose shm is a tmpfs mount; inside the process's root it is a loop.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("42/root");
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink("/dev", root.join("dev")).unwrap();
        assert!(open_shm(&dir.path().join("42")).is_none());
        let mut reader = ShmReader::new(dir.path().to_path_buf());
        assert_eq!(reader.of_process(42), None);
    }

    #[test]
    fn real_shm_of_this_process() {
        let mut reader = ShmReader::new(PathBuf::from("/proc"));
        // /dev/shm is a tmpfs on every Linux this runs on; where it is not, size is unknown.
        if let Some(shm) = reader.of_process(std::process::id()) {
            assert!(shm.size_bytes.is_some_and(|s| s > 0));
        }
    }
}
