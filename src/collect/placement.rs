//! Where the GPU processes run below the host, joined onto their rows once per refresh: their
//! cgroup and limits ([`super::cgroup`]), container or pod ([`super::container`]), Slurm task
//! ([`super::scheduler`]), `/dev/shm`, nested pids (NSpid), the Apptainer or enroot container
//! its cgroup does not name ([`super::container::hpc`]), and the OOM kills seen
//! ([`super::oom_watch`]); and on the host snapshot, the container torchtop itself runs in.
//!
//! Roots: the proc root (`/proc`) and the file system root (`/`, for `/sys/fs/cgroup`,
//! `/.dockerenv` and `/run/.containerenv`); tests point both at fixture trees.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::{
    Cgroup, GpuProcess, HostSnapshot, LaunchEnv, ProcessContainer, ProcessKind, SlurmTask,
};
use crate::sys::cgroup as cg;
use crate::sys::proc as procfs;
use crate::sys::PidMap;

use super::cgroup::CgroupReader;
use super::container::{detect_own_container, hpc, ShmReader};
use super::oom_watch::OomWatch;
use super::scheduler::{pod_name, shared_slurm_task};

/// Whether a join starts a new refresh, or adds rows to the one just joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refresh {
    New,
    Same,
}

pub(crate) struct Placement {
    proc_root: PathBuf,
    fs_root: PathBuf,
    cgroups: CgroupReader,
    shm: ShmReader,
    oom: OomWatch,
    /// `Some(None)`: looked, not in a container.
    own_container: Option<Option<Arc<str>>>,
    /// The host's mount namespace and root ([`hpc::HostRefs`]), read on first use.
    host: Option<hpc::HostRefs>,
    /// NSpid and the Slurm task by (pid, start ticks): NSpid read once per process, the
    /// task kept to be shared again while it is the same.
    known: HashMap<(u32, u64), Known>,
    /// The cgroups of pods named from their processes' environments ([`pod_name`]), shared by
    /// the rows of a pod until the reader's cgroup changes.
    named_pods: Vec<NamedPod>,
    /// Counts the refreshes ([`Placement::begin`]).
    refresh: u64,
    /// The first row of each pid in the join under way, by pid (kept for its capacity).
    done: PidMap<u32, usize>,
    /// (pid, start ticks, RSS) of the rows the joins after a refresh's first added (agents
    /// whose process holds no GPU): seen again by the next refresh's first join before it
    /// forgets what it did not see, so their comm is not made again every refresh.
    later_rows: Vec<(u32, u64, Option<u64>)>,
}

impl Placement {
    pub(crate) fn new(proc_root: PathBuf, fs_root: PathBuf, page_size: u64) -> Self {
        let mount = fs_root.join("sys/fs/cgroup");
        Placement {
            cgroups: CgroupReader::new(proc_root.clone(), mount, page_size),
            shm: ShmReader::new(proc_root.clone()),
            proc_root,
            fs_root,
            oom: OomWatch::default(),
            own_container: None,
            host: None,
            known: HashMap::new(),
            named_pods: Vec::new(),
            refresh: 0,
            done: PidMap::default(),
            later_rows: Vec::new(),
        }
    }

    /// The kills seen since the host's OOM-kill count (`host.oom_kill_count`, from
    /// /proc/vmstat) and the watched cgroups' counters last rose, and torchtop's own container.
    pub(crate) fn sample_host(&mut self, host: &mut HostSnapshot) {
        let (proc_root, fs_root) = (&self.proc_root, &self.fs_root);
        host.container.clone_from(
            self.own_container
                .get_or_insert_with(|| detect_own_container(fs_root, proc_root).map(Arc::from)),
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        host.oom_kills = self.oom.sample(&self.proc_root, host.oom_kill_count, now);
    }

    /// Whether the OOM watch has GPU processes, children or cgroups that a kill could name.
    pub(crate) fn watches_for_oom(&self) -> bool {
        self.oom.is_watching()
    }

    /// Starts a join: a new refresh forgets what the cgroup and `/dev/shm` readers read, and
    /// what the OOM watch saw, unless this join names it again.
    pub(crate) fn begin(&mut self, refresh: Refresh) {
        if refresh == Refresh::New {
            self.refresh += 1;
            self.cgroups.new_refresh();
            self.shm.new_refresh();
            self.oom.begin();
        }
    }

    /// Notes a child of a GPU process seen in this join, watched for OOM kills; `comm` is
    /// asked for only on first sight.
    pub(crate) fn see_child(
        &mut self,
        pid: u32,
        start_ticks: u64,
        rss_bytes: Option<u64>,
        comm: impl FnOnce() -> String,
    ) {
        self.oom.see(pid, start_ticks, rss_bytes, comm);
    }

    /// Fills each visible row's cgroup, Slurm task, `/dev/shm` (rows with children) and
    /// nested pids, and watches the rows and their cgroups for OOM kills. Called after
    /// [`Placement::begin`].
    pub(crate) fn join(&mut self, rows: &mut [GpuProcess], refresh: Refresh) {
        self.done.clear();
        let now = std::time::Instant::now();
        for i in 0..rows.len() {
            if let Some(&first) = self.done.get(&rows[i].pid) {
                let (cgroup, shm, slurm, ns, container) = {
                    let r = &rows[first];
                    (
                        r.cgroup.clone(),
                        r.shm.clone(),
                        r.slurm.clone(),
                        r.ns_pids.clone(),
                        r.container.clone(),
                    )
                };
                let row = &mut rows[i];
                (row.cgroup, row.shm, row.slurm, row.ns_pids) = (cgroup, shm, slurm, ns);
                row.container = container;
                continue;
            }
            self.done.insert(rows[i].pid, i);
            self.join_row(&mut rows[i], now);
        }
        match refresh {
            Refresh::New => self.end_refresh(),
            Refresh::Same => {
                let later = rows.iter().filter(|r| r.visible);
                let later = later.filter_map(|r| Some((r.pid, r.start_ticks?, r.rss_bytes)));
                self.later_rows.extend(later);
            }
        }
    }

    /// Forgets what neither this refresh's first join nor the last refresh's later joins
    /// named: the rows those joins add come after this one, and are named again by them.
    fn end_refresh(&mut self) {
        let refresh = self.refresh;
        for (pid, start_ticks, rss_bytes) in self.later_rows.drain(..) {
            if let Some(known) = self.known.get_mut(&(pid, start_ticks)) {
                known.seen_in = refresh;
            }
            // Seen at the last refresh, so the watch has its comm already.
            self.oom.see(pid, start_ticks, rss_bytes, String::new);
        }
        self.known.retain(|_, known| known.seen_in == refresh);
        self.named_pods.retain(|named| named.used_in + 1 >= refresh);
        self.oom.end();
    }

    fn join_row(&mut self, row: &mut GpuProcess, now: std::time::Instant) {
        row.cgroup = None;
        row.shm = None;
        row.slurm = None;
        row.ns_pids = None;
        row.container = None;
        let (true, Some(start_ticks)) = (row.visible, row.start_ticks) else {
            return;
        };
        let env = row.env.as_deref();
        let oom = &self.oom;
        let found = (self.cgroups).of_known_process(row.pid, start_ticks, now, |f| oom.fresh(f));
        if let Some(found) = found {
            let cgroup = match pod_name(found.cgroup, env) {
                Some(name) => named_pod(&mut self.named_pods, found.cgroup, name, self.refresh),
                None => Arc::clone(found.cgroup),
            };
            // Once per cgroup and refresh: the rows after the first add nothing.
            if let (true, Some(file), Some(kills)) =
                (found.first_in_refresh, found.oom_file, cgroup.oom_kills)
            {
                self.oom.watch(file, &cgroup, kills);
            }
            row.cgroup = Some(cgroup);
        }
        if row.children_count.is_some_and(|n| n > 0) && row.kind != ProcessKind::Graphics {
            row.shm = self.shm.of_process(row.pid);
        }
        let cgroup_names_one =
            (row.cgroup.as_deref()).is_some_and(|c| c.container.is_some() || c.pod.is_some());
        let known = self.known(row.pid, start_ticks, env, cgroup_names_one);
        known.slurm = shared_slurm_task(env, row.cgroup.as_deref(), known.slurm.as_ref());
        row.slurm = known.slurm.clone();
        row.ns_pids = known.ns_pids.clone();
        row.container = known.container.clone();
        let command = row.command.as_deref();
        self.oom.see(row.pid, start_ticks, row.rss_bytes, || {
            command.map(short_command).unwrap_or_default()
        });
    }

    /// What is kept of the process (`pid`, `start_ticks`), its NSpid and its Apptainer or
    /// enroot container read on first sight (a GPU process is seen after its runtime has
    /// switched its root and environment); the container again when `cgroup_names_one`
    /// changes (a cgroup unread at first sight, read since).
    fn known(
        &mut self,
        pid: u32,
        start_ticks: u64,
        env: Option<&LaunchEnv>,
        cgroup_names_one: bool,
    ) -> &mut Known {
        let (proc_root, fs_root) = (self.proc_root.as_path(), self.fs_root.as_path());
        let host = *self
            .host
            .get_or_insert_with(|| hpc::HostRefs::read(proc_root, fs_root));
        let container = || {
            let found = hpc::of_process(proc_root, pid, env, &host, cgroup_names_one);
            found.map(Arc::new)
        };
        let refresh = self.refresh;
        let known = self
            .known
            .entry((pid, start_ticks))
            .or_insert_with(|| Known {
                ns_pids: read_nested_pids(proc_root, pid).map(Arc::from),
                slurm: None,
                container: container(),
                cgroup_names_one,
                seen_in: refresh,
            });
        if known.cgroup_names_one != cgroup_names_one {
            known.container = container();
            known.cgroup_names_one = cgroup_names_one;
        }
        known.seen_in = refresh;
        known
    }
}

/// What is kept of a process between refreshes.
struct Known {
    ns_pids: Option<Arc<[u32]>>,
    slurm: Option<Arc<SlurmTask>>,
    container: Option<Arc<ProcessContainer>>,
    /// Whether its cgroup named a container or pod when `container` was read.
    cgroup_names_one: bool,
    /// The refresh that last joined it.
    seen_in: u64,
}

/// A pod's cgroup named from a process's environment.
struct NamedPod {
    /// The reader's cgroup it was made from.
    read: Arc<Cgroup>,
    named: Arc<Cgroup>,
    used_in: u64,
}

/// `read` with its pod named `name`: shared with the other rows that name it so, made again
/// only when the reader's cgroup changes (a new reading) or the name does.
fn named_pod(
    named_pods: &mut Vec<NamedPod>,
    read: &Arc<Cgroup>,
    name: Option<&str>,
    refresh: u64,
) -> Arc<Cgroup> {
    fn pod_name(c: &Cgroup) -> Option<&str> {
        c.pod.as_ref()?.name.as_deref()
    }
    if pod_name(read) == name {
        return Arc::clone(read);
    }
    let kept = named_pods
        .iter_mut()
        .find(|n| Arc::ptr_eq(&n.read, read) && pod_name(&n.named) == name);
    if let Some(kept) = kept {
        kept.used_in = refresh;
        return Arc::clone(&kept.named);
    }
    let mut cgroup = Cgroup::clone(read);
    if let Some(pod) = cgroup.pod.as_mut() {
        pod.name = name.map(str::to_string);
    }
    let named = Arc::new(cgroup);
    named_pods.push(NamedPod {
        read: Arc::clone(read),
        named: Arc::clone(&named),
        used_in: refresh,
    });
    named
}

/// NSpid of /proc/PID/status when it lists more than this namespace's pid.
fn read_nested_pids(proc_root: &Path, pid: u32) -> Option<Vec<u32>> {
    let status = cg::read_small(&procfs::pid_dir(proc_root, pid).join("status"))?;
    cg::parse_nspid(&status).filter(|pids| pids.len() > 1)
}

/// The program's base name from a command line, as `comm` would show it.
fn short_command(command: &str) -> String {
    let program = command.split_whitespace().next().unwrap_or_default();
    program
        .rsplit('/')
        .next()
        .unwrap_or(program)
        .chars()
        .take(32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::container::hpc::tests::{mount_namespace, write};
    use crate::model::{PodRef, ProcessKind};

    #[test]
    fn a_container_read_before_its_cgroup_is_read_again_with_it() {
        // Pid 7 in a mount namespace and root of its own holding `/.lock`, its cgroup not yet
        // readable: enroot, by its root.
        let dir = tempfile::tempdir().unwrap();
        let (fs_root, proc_root) = (dir.path(), dir.path().join("proc"));
        mount_namespace(&proc_root, "1", "mnt:[4026531841]");
        std::fs::create_dir_all(proc_root.join("1/root")).unwrap();
        mount_namespace(&proc_root, "7", "mnt:[4026532999]");
        write(&proc_root, "7/root/.lock", b"");
        write(
            fs_root,
            "sys/fs/cgroup/cgroup.controllers",
            b"memory pids\n",
        );
        let mut placement = Placement::new(proc_root.clone(), fs_root.to_path_buf(), 4096);
        let mut row = GpuProcess::new(7, 0, ProcessKind::Compute);
        (row.visible, row.start_ticks) = (true, Some(100));
        let mut rows = [row];
        placement.begin(Refresh::New);
        placement.join(&mut rows, Refresh::New);
        assert_eq!(rows[0].container.as_ref().unwrap().runtime, "enroot");
        // Its cgroup read since names a Docker container: that is its name, and the `/.lock`
        // its image holds no enroot.
        let scope = format!("system.slice/docker-{}.scope", "ab".repeat(32));
        write(&proc_root, "7/cgroup", format!("0::/{scope}\n").as_bytes());
        write(
            fs_root,
            &format!("sys/fs/cgroup/{scope}/memory.max"),
            b"max\n",
        );
        placement.begin(Refresh::New);
        placement.join(&mut rows, Refresh::New);
        let cgroup = rows[0].cgroup.as_ref().expect("its cgroup, read");
        assert_eq!(cgroup.container.as_ref().unwrap().runtime, "docker");
        assert_eq!(rows[0].container, None);
    }

    #[test]
    fn rows_of_a_pod_share_its_named_cgroup_until_a_new_reading() {
        let pod = Some(PodRef {
            uid: "u".into(),
            qos: None,
            name: None,
        });
        let read = Arc::new(Cgroup {
            pod,
            ..Default::default()
        });
        let mut named = Vec::new();
        let first = named_pod(&mut named, &read, Some("web"), 1);
        let second = named_pod(&mut named, &read, Some("web"), 1);
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(first.pod.as_ref().unwrap().name.as_deref(), Some("web"));
        assert!(Arc::ptr_eq(&named_pod(&mut named, &read, None, 1), &read));
        let reread = Arc::new(Cgroup::clone(&read));
        let third = named_pod(&mut named, &reread, Some("web"), 2);
        assert!(!Arc::ptr_eq(&first, &third));
        assert_eq!(third.pod.as_ref().unwrap().name.as_deref(), Some("web"));
    }
}
