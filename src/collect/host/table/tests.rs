//! Tests of the tree view's table on writable proc trees: what is read again and what is not.

use std::path::{Path, PathBuf};

use super::*;
use crate::model::ProcessKind;

/// A writable proc tree in the temp directory, removed on drop.
struct Tree(tempfile::TempDir);

impl Tree {
    fn new() -> Self {
        let tree = Tree(tempfile::tempdir().unwrap());
        std::fs::write(tree.root().join("uptime"), "1000.00 4000.00\n").unwrap();
        tree
    }

    fn root(&self) -> &Path {
        self.0.path()
    }

    fn collector(&self) -> HostCollector {
        HostCollector::with_units(self.root().into(), self.root().into(), 100, 4096)
    }

    /// A process: `stat` with `rss_pages` and `cpu` ticks, `status` (uid 0) and `cmdline`.
    fn process(&self, pid: u32, ppid: u32, rss_pages: u64, cpu: u64) {
        write_process(
            &self.root().join(pid.to_string()),
            pid,
            ppid,
            rss_pages,
            cpu,
            500,
        );
    }

    fn remove(&self, pid: u32) {
        std::fs::remove_dir_all(self.root().join(pid.to_string())).unwrap();
    }

    /// Another process under `pid`: a new directory (so a new inode) put in place of the old.
    fn replace(&self, pid: u32, ppid: u32, start: u64) {
        let fresh: PathBuf = self.root().join(format!("{pid}.new"));
        write_process(&fresh, pid, ppid, 7, 0, start);
        self.remove(pid);
        std::fs::rename(&fresh, self.root().join(pid.to_string())).unwrap();
    }
}

fn write_process(dir: &Path, pid: u32, ppid: u32, rss_pages: u64, cpu: u64, start: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let stat = format!(
        "{pid} (proc{pid}) S {ppid} {pid} {ppid} 0 -1 0 0 0 0 0 {cpu} 0 0 0 20 0 1 0 \
         {start} 1000 {rss_pages} 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0\n"
    );
    std::fs::write(dir.join("stat"), stat).unwrap();
    std::fs::write(dir.join("status"), "Name:\tx\nUid:\t0\t0\t0\t0\n").unwrap();
    std::fs::write(dir.join("cmdline"), format!("run\0{pid}\0")).unwrap();
}

fn gpu(pid: u32) -> Vec<GpuProcess> {
    vec![GpuProcess::new(pid, 0, ProcessKind::Compute)]
}

fn find(table: &[HostProcess], pid: u32) -> &HostProcess {
    table
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("pid {pid} is not in {table:#?}"))
}

fn pids(table: &[HostProcess]) -> Vec<u32> {
    table.iter().map(|p| p.pid).collect()
}

/// A shell (50) running a trainer on a GPU (100) with two workers (101, 102); an unrelated
/// process (200) beside them.
fn family() -> Tree {
    let tree = Tree::new();
    tree.process(50, 1, 10, 0);
    tree.process(100, 50, 1000, 0);
    tree.process(101, 100, 200, 0);
    tree.process(102, 100, 300, 0);
    tree.process(200, 1, 5, 0);
    tree
}

#[test]
fn only_the_tree_goes_out_and_only_the_rows_on_screen_are_read_again() {
    let tree = family();
    let mut collector = tree.collector();
    let t0 = Instant::now();
    let first = collector.tree_table_at(&gpu(100), Some(&[100, 101]), t0);
    assert_eq!(
        pids(&first),
        [50, 100, 101, 102],
        "members only, not pid 200"
    );
    assert!(first.iter().all(|p| !p.stale), "all read at first sight");
    assert_eq!(find(&first, 102).command.as_deref(), Some("run 102"));
    assert_eq!(find(&first, 102).user.as_deref(), Some("root"));

    // Both workers' figures move; only 101 is on screen.
    tree.process(101, 100, 250, 100);
    tree.process(102, 100, 350, 100);
    let second = collector.tree_table_at(&gpu(100), Some(&[100, 101]), t0 + Duration::from_secs(1));
    let (shown, hidden) = (find(&second, 101), find(&second, 102));
    assert!(!shown.stale);
    assert_eq!(shown.rss_bytes, Some(250 * 4096));
    assert_eq!(shown.cpu_percent, Some(100.0));
    assert!(hidden.stale, "{hidden:?}");
    assert_eq!(hidden.rss_bytes, Some(300 * 4096), "the last figures read");
    assert_eq!(hidden.command.as_deref(), Some("run 102"));
    assert_eq!(
        hidden.running_seconds,
        Some(995.0),
        "the running time is computed anew"
    );

    // Scrolled into view: read again.
    let third = collector.tree_table_at(&gpu(100), Some(&[102]), t0 + Duration::from_secs(2));
    assert!(!find(&third, 102).stale);
    assert_eq!(find(&third, 102).rss_bytes, Some(350 * 4096));
    // Without a screen (a recording), every member is read.
    tree.process(101, 100, 260, 100);
    let all = collector.tree_table_at(&gpu(100), None, t0 + Duration::from_secs(3));
    assert!(all.iter().all(|p| !p.stale));
    assert_eq!(find(&all, 101).rss_bytes, Some(260 * 4096));
}

#[test]
fn a_new_pid_is_read_once_and_a_gone_one_leaves() {
    let tree = family();
    let mut collector = tree.collector();
    let t0 = Instant::now();
    collector.tree_table_at(&gpu(100), Some(&[100]), t0);
    tree.process(103, 100, 400, 0);
    tree.remove(101);
    let next = collector.tree_table_at(&gpu(100), Some(&[100]), t0 + Duration::from_secs(1));
    assert_eq!(pids(&next), [50, 100, 102, 103]);
    let new = find(&next, 103);
    assert!(!new.stale, "read when first listed");
    assert_eq!(new.rss_bytes, Some(400 * 4096));
    assert_eq!(new.command.as_deref(), Some("run 103"));
    // Off screen from then on: not read again.
    tree.process(103, 100, 450, 0);
    let later = collector.tree_table_at(&gpu(100), Some(&[100]), t0 + Duration::from_secs(2));
    assert!(find(&later, 103).stale);
    assert_eq!(find(&later, 103).rss_bytes, Some(400 * 4096));
}

#[test]
fn a_process_that_becomes_a_member_is_read_then() {
    let tree = family();
    let mut collector = tree.collector();
    let t0 = Instant::now();
    collector.tree_table_at(&gpu(100), Some(&[]), t0);
    // 200 starts using a GPU: it joins the tree, read though it was only listed before.
    tree.process(200, 1, 9, 0);
    let mut both = gpu(100);
    both.extend(gpu(200));
    let next = collector.tree_table_at(&both, Some(&[]), t0 + Duration::from_secs(1));
    let joined = find(&next, 200);
    assert!(!joined.stale);
    assert_eq!(joined.rss_bytes, Some(9 * 4096));
    assert_eq!(joined.command.as_deref(), Some("run 200"));
}

#[test]
fn another_process_under_a_known_pid_is_read_though_off_screen() {
    let tree = family();
    let mut collector = tree.collector();
    let t0 = Instant::now();
    collector.tree_table_at(&gpu(100), Some(&[100]), t0);
    // 102 exits and its pid goes to a new worker of the trainer.
    tree.replace(102, 100, 900);
    let next = collector.tree_table_at(&gpu(100), Some(&[100]), t0 + Duration::from_secs(1));
    let reused = find(&next, 102);
    assert_eq!(reused.start_ticks, 900);
    assert_eq!(reused.rss_bytes, Some(7 * 4096));
    assert!(!reused.stale);
}

#[test]
fn an_orphan_is_found_under_its_new_parent() {
    let tree = family();
    // 101 forked 110; the trainer (100) is a subreaper, so 110 goes to it when 101 exits.
    tree.process(110, 101, 20, 0);
    let mut collector = tree.collector();
    let t0 = Instant::now();
    let first = collector.tree_table_at(&gpu(100), Some(&[100]), t0);
    assert_eq!(find(&first, 110).ppid, 101);
    tree.remove(101);
    tree.process(110, 100, 20, 0);
    let next = collector.tree_table_at(&gpu(100), Some(&[100]), t0 + Duration::from_secs(1));
    assert_eq!(pids(&next), [50, 100, 102, 110]);
    assert_eq!(find(&next, 110).ppid, 100);
}

#[test]
fn an_unreadable_proc_root_gives_an_empty_table() {
    let tree = family();
    let mut collector = tree.collector();
    assert_eq!(collector.tree_table(&gpu(100), None).len(), 4);
    let mut gone =
        HostCollector::with_units(tree.root().join("nothing"), tree.root().into(), 100, 4096);
    assert!(gone.tree_table(&gpu(100), None).is_empty());
}

#[test]
fn the_root_is_listed_only_when_loadavg_says_processes_came_or_went() {
    let tree = family();
    let loadavg = |threads: u32, last_pid: u32| {
        let text = format!("0.00 0.00 0.00 1/{threads} {last_pid}\n");
        std::fs::write(tree.root().join("loadavg"), text).unwrap();
    };
    loadavg(100, 500);
    let mut collector = tree.collector();
    let t0 = Instant::now();
    collector.tree_table_at(&gpu(100), None, t0);
    // A fixture can add a process without moving the last pid; the kernel cannot.
    tree.process(103, 100, 400, 0);
    let same = collector.tree_table_at(&gpu(100), None, t0 + Duration::from_secs(1));
    assert_eq!(pids(&same), [50, 100, 101, 102], "not listed");
    loadavg(101, 503);
    let listed = collector.tree_table_at(&gpu(100), None, t0 + Duration::from_secs(2));
    assert_eq!(pids(&listed), [50, 100, 101, 102, 103]);
    // A GPU process the table lacks is looked for at once, loadavg or not.
    tree.process(300, 1, 5, 0);
    let mut both = gpu(100);
    both.extend(gpu(300));
    let found = collector.tree_table_at(&both, None, t0 + Duration::from_secs(3));
    assert_eq!(pids(&found), [50, 100, 101, 102, 103, 300]);
}

#[test]
fn a_big_table_is_listed_less_often_and_a_missing_gpu_pid_only_once() {
    let t0 = Instant::now();
    let table = |count: u32| HostTable {
        processes: (1..=count)
            .map(|pid| HostProcess {
                pid,
                ..HostProcess::default()
            })
            .collect(),
        listed_at: Some(t0),
        missing: vec![77_777],
        ..HostTable::default()
    };
    let after = |ms| t0 + Duration::from_millis(ms);
    let small = table(100);
    assert!(small.listing_due(&[], None, after(1000)), "every refresh");
    let big = table(10_000);
    assert!(!big.listing_due(&[], None, after(1000)));
    assert!(big.listing_due(&[], None, after(2000)));
    // A GPU pid of another container, missing at the last listing: no listing for it.
    assert!(!big.listing_due(&gpu(77_777), None, after(1000)));
    assert!(
        big.listing_due(&gpu(88_888), None, after(1000)),
        "a new one"
    );
}

#[test]
fn real_proc_the_tree_of_a_child_holds_its_parent_and_its_own_child() {
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg("sleep 30 & wait")
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut collector = HostCollector::new(PathBuf::from("/proc"));
    let deadline = Instant::now() + crate::test_ci::PATIENCE;
    let table = loop {
        let table = collector.tree_table(&gpu(pid), Some(&[pid]));
        if table.iter().any(|p| p.ppid == pid) || Instant::now() > deadline {
            break table;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let grandchild = table.iter().find(|p| p.ppid == pid).map(|p| p.pid);
    if let Some(sleeper) = grandchild {
        // SAFETY: kill has no memory preconditions; this is our grandchild.
        unsafe { libc::kill(sleeper as libc::pid_t, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(grandchild.is_some(), "the sleep under {pid} in {table:#?}");
    assert_eq!(find(&table, pid).ppid, std::process::id());
    assert!(
        table.iter().any(|p| p.pid == std::process::id()),
        "this test, an ancestor"
    );
    assert!(table.iter().all(|p| p.pid != 1), "init is left out");
}
