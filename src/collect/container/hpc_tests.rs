//! Apptainer and enroot on fixture proc trees in the kernel's formats: environ, mountinfo, the
//! `ns/mnt` links and the process's root.

use std::path::Path;

use super::*;

const HOST_NS: &str = "mnt:[4026531841]";
const JOB_NS: &str = "mnt:[4026532999]";

/// Writes `bytes` to `path` below `root`, making its directories.
pub(crate) fn write(root: &Path, path: &str, bytes: &[u8]) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// `proc/PID/ns/mnt` as the kernel shows it: a link to nowhere that names the namespace.
pub(crate) fn mount_namespace(proc_root: &Path, pid: &str, link: &str) {
    let path = proc_root.join(pid).join("ns/mnt");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(link, path).unwrap();
}

/// A proc root whose pid 1 is in the host's mount namespace and root, and process `pid` in a
/// Slurm job's, with `environ` and a root directory of its own.
fn tree(pid: u32, environ: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    mount_namespace(dir.path(), "1", HOST_NS);
    std::fs::create_dir_all(dir.path().join("1/root")).unwrap();
    mount_namespace(dir.path(), &pid.to_string(), JOB_NS);
    write(dir.path(), &format!("{pid}/environ"), environ);
    std::fs::create_dir_all(dir.path().join(format!("{pid}/root"))).unwrap();
    dir
}

/// Its environ read and parsed as the host collector does, with its mount namespace.
fn environ(proc_root: &Path, pid: u32) -> Option<LaunchEnv> {
    let mut env = procfs::read_environ(proc_root, pid).ok()?;
    env.agent_dir_vars.mount_ns = procfs::read_mount_namespace(proc_root, pid);
    Some(env)
}

/// The host as the collector reads it: the proc root stands for the file system root, which
/// is torchtop's root where pid 1's cannot be read.
fn host(proc_root: &Path) -> HostRefs {
    HostRefs::read(proc_root, proc_root)
}

/// What the collector finds for `pid`.
fn found(proc_root: &Path, pid: u32) -> Option<ProcessContainer> {
    let env = environ(proc_root, pid);
    of_process(proc_root, pid, env.as_ref(), &host(proc_root), false)
}

/// Makes `PID/root` a link to `target`, as /proc shows a process whose root is that directory.
fn root_at(proc_root: &Path, pid: u32, target: &Path) {
    let root = proc_root.join(format!("{pid}/root"));
    std::fs::remove_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(target, root).unwrap();
}

/// An enroot container as pyxis starts it: the rootfs directory in `ENROOT_DATA_PATH`, made
/// `/` in the task's own mount namespace, with enroot's `/.lock` in it.
fn enroot_tree(pid: u32) -> tempfile::TempDir {
    let dir = tree(pid, b"PATH=/usr/bin\0SLURM_JOB_ID=42\0");
    write(dir.path(), &format!("{pid}/root/.lock"), b"");
    write(
        dir.path(),
        &format!("{pid}/mountinfo"),
        b"2104 1985 259:2 /var/lib/enroot/data/pyxis_42_train / rw,nosuid,relatime master:1 - ext4 /dev/nvme0n1p2 rw\n\
          2105 2104 0:5 / /dev rw,nosuid - devtmpfs udev rw,size=4096k\n\
          2107 2104 0:22 / /proc rw,nosuid,nodev,noexec - proc proc rw\n",
    );
    dir
}

#[test]
fn an_apptainer_process_is_named_by_its_image() {
    let dir = tree(
        42,
        b"PATH=/usr/bin\0APPTAINER_CONTAINER=/scratch/img/pytorch-24.05.sif\0\
          APPTAINER_NAME=pytorch-24.05.sif\0SINGULARITY_CONTAINER=/scratch/img/pytorch-24.05.sif\0\
          SINGULARITY_NAME=pytorch-24.05.sif\0SLURM_JOB_ID=4242\0",
    );
    assert_eq!(
        found(dir.path(), 42),
        Some(ProcessContainer {
            runtime: "apptainer".into(),
            name: Some("pytorch-24.05.sif".into()),
            path: Some("/scratch/img/pytorch-24.05.sif".into()),
        })
    );
    // Its environment is read even where its cgroup names a container (Apptainer in a pod).
    let env = environ(dir.path(), 42);
    assert!(of_process(dir.path(), 42, env.as_ref(), &host(dir.path()), true).is_some());
}

#[test]
fn singularity_alone_and_a_name_from_the_path() {
    let dir = tree(42, b"SINGULARITY_CONTAINER=/images/sandbox/tf2/\0");
    assert_eq!(
        found(dir.path(), 42),
        Some(ProcessContainer {
            runtime: "singularity".into(),
            name: Some("tf2".into()),
            path: Some("/images/sandbox/tf2/".into()),
        })
    );
    let only_name = ContainerVars {
        apptainer_name: Some("x.sif".into()),
        ..Default::default()
    };
    let container = from_environment(&only_name).unwrap();
    assert_eq!(
        (container.name.as_deref(), container.path),
        (Some("x.sif"), None)
    );
}

#[test]
fn an_enroot_process_is_named_by_its_root_directory() {
    let dir = enroot_tree(43);
    assert_eq!(
        found(dir.path(), 43),
        Some(ProcessContainer {
            runtime: "enroot".into(),
            name: Some("pyxis_42_train".into()),
            path: Some("/var/lib/enroot/data/pyxis_42_train".into()),
        })
    );
}

#[test]
fn an_enroot_root_the_mount_table_cannot_name_is_enroot_without_a_name() {
    // A squashfs image started through fuse-overlayfs: `/` is the root of its own mount.
    let dir = enroot_tree(43);
    write(
        dir.path(),
        "43/mountinfo",
        b"2104 1985 0:90 / / rw,nodev,relatime - fuse.fuse-overlayfs fuse-overlayfs rw\n",
    );
    let container = found(dir.path(), 43).unwrap();
    assert_eq!(
        (container.runtime.as_str(), container.name, container.path),
        ("enroot", None, None)
    );
    std::fs::remove_file(dir.path().join("43/mountinfo")).unwrap();
    assert_eq!(found(dir.path(), 43).unwrap().runtime, "enroot");
}

#[test]
fn a_process_in_neither_has_no_container() {
    let dir = tree(44, b"PATH=/usr/bin\0SLURM_JOB_ID=42\0HOME=/home/alice\0");
    write(
        dir.path(),
        "44/mountinfo",
        b"22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n",
    );
    assert_eq!(found(dir.path(), 44), None);
    // Unreadable environ and root: nothing, not a guess.
    assert_eq!(found(dir.path(), 45), None);
}

#[test]
fn a_lock_on_the_hosts_root_or_under_a_named_container_is_not_enroot() {
    let dir = enroot_tree(43);
    // The same mount namespace as pid 1: the host's own root, which happens to hold /.lock.
    std::fs::remove_file(dir.path().join("43/ns/mnt")).unwrap();
    mount_namespace(dir.path(), "43", HOST_NS);
    assert_eq!(found(dir.path(), 43), None);
    let dir = enroot_tree(43);
    let env = environ(dir.path(), 43);
    let host = host(dir.path());
    assert_eq!(of_process(dir.path(), 43, env.as_ref(), &host, true), None);
    // Without pid 1's namespace, torchtop's own stands in.
    let dir = enroot_tree(43);
    std::fs::remove_file(dir.path().join("1/ns/mnt")).unwrap();
    assert_eq!(found(dir.path(), 43), None, "no namespace to compare with");
    mount_namespace(dir.path(), "self", HOST_NS);
    assert_eq!(found(dir.path(), 43).unwrap().runtime, "enroot");
}

#[test]
fn apptainer_variables_on_a_host_process_name_no_container() {
    // `srun --export=ALL` from an `apptainer shell`: a host task carries the variables.
    let environ = b"APPTAINER_CONTAINER=/scratch/img/pytorch.sif\0APPTAINER_NAME=pytorch.sif\0";
    let dir = tree(42, environ);
    std::fs::remove_file(dir.path().join("42/ns/mnt")).unwrap();
    mount_namespace(dir.path(), "42", HOST_NS);
    root_at(dir.path(), 42, &dir.path().join("1/root"));
    assert_eq!(found(dir.path(), 42), None, "the host's namespace and root");
    // A mount namespace of its own over the host's root (`unshare -m`) is no container either.
    std::fs::remove_file(dir.path().join("42/ns/mnt")).unwrap();
    mount_namespace(dir.path(), "42", JOB_NS);
    assert_eq!(found(dir.path(), 42), None, "the host's root");
    // Nothing to compare with: nothing said.
    let dir = tree(42, environ);
    std::fs::remove_file(dir.path().join("1/ns/mnt")).unwrap();
    assert_eq!(found(dir.path(), 42), None, "the host's namespace unknown");
    // Where torchtop shares the container (its own namespace stands in for the host's), the
    // root's `/.singularity.d` confirms the variables.
    mount_namespace(dir.path(), "self", JOB_NS);
    assert_eq!(found(dir.path(), 42), None);
    std::fs::create_dir_all(dir.path().join("42/root/.singularity.d")).unwrap();
    assert_eq!(found(dir.path(), 42).unwrap().runtime, "apptainer");
}

#[test]
fn a_private_mount_namespace_over_the_hosts_root_is_not_enroot() {
    // `touch /.lock; unshare -m sleep 300`: its own namespace, the host's root.
    let dir = enroot_tree(43);
    write(dir.path(), "1/root/.lock", b"");
    root_at(dir.path(), 43, &dir.path().join("1/root"));
    assert_eq!(found(dir.path(), 43), None);
    // Where pid 1's root is unreadable, torchtop's own stands in.
    std::fs::remove_dir_all(dir.path().join("1/root")).unwrap();
    write(dir.path(), ".lock", b"");
    root_at(dir.path(), 43, dir.path());
    assert_eq!(found(dir.path(), 43), None);
}

#[test]
fn names_lose_the_characters_that_reorder_text() {
    let dir = tree(
        42,
        "APPTAINER_NAME=evil\u{202e}fis.exe\u{2066}\u{200f}\0APPTAINER_CONTAINER=/img/\u{202d}a.sif\0"
            .as_bytes(),
    );
    let container = found(dir.path(), 42).unwrap();
    assert_eq!(container.name.as_deref(), Some("evilfis.exe"));
    assert_eq!(container.path.as_deref(), Some("/img/a.sif"));
}

#[test]
fn a_lock_that_is_a_link_onto_the_hosts_files_is_not_followed() {
    let dir = enroot_tree(43);
    let host_file = dir.path().join("host-lock");
    write(dir.path(), "host-lock", b"");
    let lock = dir.path().join("43/root/.lock");
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink(&host_file, &lock).unwrap();
    assert_eq!(found(dir.path(), 43), None);
    // A /.singularity.d that is a link onto a host directory is not Apptainer's either.
    std::os::unix::fs::symlink(dir.path(), dir.path().join("43/root/.singularity.d")).unwrap();
    assert_eq!(found(dir.path(), 43), None);
    std::fs::create_dir_all(dir.path().join("44/root/.singularity.d")).unwrap();
    mount_namespace(dir.path(), "44", JOB_NS);
    let container = found(dir.path(), 44).unwrap();
    assert_eq!(
        (container.runtime.as_str(), container.name),
        ("apptainer", None)
    );
}

#[test]
fn a_hostile_environment_is_cut_and_rid_of_control_characters() {
    let mut environ = b"APPTAINER_NAME=".to_vec();
    for _ in 0..1200 {
        environ.extend_from_slice(b"\x1b[2J\x07\nab\r");
    }
    environ.extend_from_slice(b"\0APPTAINER_CONTAINER=/img/");
    environ.extend(std::iter::repeat_n(b'\x9b', 2));
    environ.extend(std::iter::repeat_n(b'y', 10_000));
    environ.push(0);
    let dir = tree(42, &environ);
    // Kept no longer than a path can be, as parsed.
    let env = procfs::read_environ(dir.path(), 42).unwrap();
    let kept = env.container_vars.apptainer_container.unwrap();
    assert!(kept.len() <= ContainerVars::MOST_BYTES, "{}", kept.len());
    let container = found(dir.path(), 42).unwrap();
    let name = container.name.unwrap();
    let path = container.path.unwrap();
    for text in [&name, &path] {
        assert!(!text.chars().any(char::is_control), "{text:?}");
    }
    assert_eq!(name.chars().count(), NAME_CHARS);
    assert!(name.starts_with("[2Jab[2Jab"), "{name:?}");
    assert!(path.chars().count() <= PATH_CHARS, "{}", path.len());
    assert!(path.starts_with("/img/"), "{path:?}");
    // Only control characters: no name at all, not an empty one.
    let dir = tree(42, b"APPTAINER_NAME=\x1b\x07\n\0");
    let container = found(dir.path(), 42).unwrap();
    assert_eq!(
        (container.runtime.as_str(), container.name),
        ("apptainer", None)
    );
}

#[test]
fn the_root_of_the_root_mount_undoes_the_kernels_escapes() {
    let mountinfo = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
                     2104 1985 259:2 /data/my\\040job\\134x / rw - xfs /dev/md0 rw\n\
                     2105 2104 0:5 / /dev rw - devtmpfs udev rw\n";
    assert_eq!(
        root_of_root_mount(mountinfo).as_deref(),
        Some("/data/my job\\x")
    );
    assert_eq!(
        root_of_root_mount("7 1 8:1 /gone//deleted / rw - xfs /dev/md0 rw\n").as_deref(),
        Some("/gone")
    );
    assert_eq!(root_of_root_mount("garbage\n\n1 2 3\n"), None);
    assert_eq!(unescape_octal("\\9\\0401\\"), "\\9 1\\");
}

#[test]
fn torchtop_itself_in_apptainer_or_enroot() {
    let dir = tempfile::tempdir().unwrap();
    let (fs_root, proc_root) = (dir.path(), dir.path().join("proc"));
    std::fs::create_dir_all(proc_root.join("1/root")).unwrap();
    assert_eq!(own_runtime(fs_root, &proc_root), None);
    // The variables alone, on the host (`srun --export=ALL`): none.
    mount_namespace(&proc_root, "1", HOST_NS);
    mount_namespace(&proc_root, "self", HOST_NS);
    write(&proc_root, "self/environ", b"SINGULARITY_NAME=a.sif\0");
    assert_eq!(
        own_runtime(fs_root, &proc_root),
        None,
        "passed on to the host"
    );
    std::fs::create_dir(fs_root.join(".singularity.d")).unwrap();
    assert_eq!(own_runtime(fs_root, &proc_root), Some("singularity"));
    write(&proc_root, "self/environ", b"APPTAINER_CONTAINER=/a.sif\0");
    assert_eq!(own_runtime(fs_root, &proc_root), Some("apptainer"));
    write(&proc_root, "self/environ", b"PATH=/bin\0");
    assert_eq!(own_runtime(fs_root, &proc_root), Some("apptainer"));
    std::fs::remove_dir(fs_root.join(".singularity.d")).unwrap();

    // enroot: /.lock, and a mount namespace and root other than pid 1's.
    write(fs_root, ".lock", b"");
    assert_eq!(
        own_runtime(fs_root, &proc_root),
        None,
        "the host's own /.lock"
    );
    std::fs::remove_file(proc_root.join("self/ns/mnt")).unwrap();
    mount_namespace(&proc_root, "self", JOB_NS);
    assert_eq!(own_runtime(fs_root, &proc_root), Some("enroot"));
    // The variables count apart from the host without `/.singularity.d`.
    write(&proc_root, "self/environ", b"APPTAINER_NAME=a.sif\0");
    assert_eq!(own_runtime(fs_root, &proc_root), Some("apptainer"));
    write(&proc_root, "self/environ", b"PATH=/bin\0");
    // A private mount namespace over the host's root (`PrivateTmp=`): not enroot.
    std::fs::remove_dir(proc_root.join("1/root")).unwrap();
    std::os::unix::fs::symlink(fs_root, proc_root.join("1/root")).unwrap();
    assert_eq!(own_runtime(fs_root, &proc_root), None, "the host's root");
    // Pid 1's namespace unreadable (not root): a user namespace stands in.
    std::fs::remove_file(proc_root.join("1/ns/mnt")).unwrap();
    write(
        &proc_root,
        "self/uid_map",
        b"         0          0 4294967295\n",
    );
    assert_eq!(own_runtime(fs_root, &proc_root), None);
    write(
        &proc_root,
        "self/uid_map",
        b"      1000       1000          1\n",
    );
    assert_eq!(own_runtime(fs_root, &proc_root), Some("enroot"));
    assert_eq!(
        crate::collect::container::detect_own_container(fs_root, &proc_root).as_deref(),
        Some("enroot")
    );
}
