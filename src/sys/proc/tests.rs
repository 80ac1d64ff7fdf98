//! The /proc parsers and readers against fixed texts, fixture trees and the real /proc.

use std::path::Path;

use super::*;
use crate::model::LaunchEnv;

const MEMINFO: &str = "MemTotal:       65843012 kB\n\
MemFree:         1234567 kB\n\
MemAvailable:   40000000 kB\n\
Buffers:          123456 kB\n\
SwapCached:            0 kB\n\
SwapTotal:       8388604 kB\n\
SwapFree:        8000000 kB\n\
HugePages_Total:       0\n\
Hugepagesize:       2048 kB\n";

#[test]
fn meminfo_converts_kib_to_bytes() {
    let info = parse_meminfo(MEMINFO).unwrap();
    assert_eq!(info.total_bytes, Some(65843012 * 1024));
    assert_eq!(info.available_bytes, Some(40000000 * 1024));
    assert_eq!(info.swap_total_bytes, Some(8388604 * 1024));
    assert_eq!(info.swap_free_bytes, Some(8000000 * 1024));
}

#[test]
fn meminfo_missing_keys_are_none() {
    // Kernels before 3.14 have no MemAvailable; a container may hide swap.
    let info = parse_meminfo("MemTotal: 1000 kB\nMemFree: 10 kB\n").unwrap();
    assert_eq!(info.total_bytes, Some(1024000));
    assert_eq!(info.available_bytes, None);
    assert_eq!(info.swap_total_bytes, None);
    assert_eq!(info.swap_free_bytes, None);
}

#[test]
fn meminfo_garbage_is_an_error() {
    assert!(parse_meminfo("").is_err());
    assert!(parse_meminfo("\u{0}\u{1}binary junk").is_err());
    let err = parse_meminfo("MemTotal: lots kB\n").unwrap_err();
    assert!(err.reason.contains("MemTotal"), "{err}");
    assert!(parse_meminfo("MemTotal: 5 MB\n").is_err());
    assert!(parse_meminfo("MemTotal:\n").is_err());
    assert!(parse_meminfo("MemTotal: 18446744073709551615 kB\n").is_err());
}

const STAT: &str = "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0\n\
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0\n\
cpu1 1335649 39126 523016 13413542 3427 0 3004 0 24024 0\n\
cpu10 1 2 3 4 5 6 7 8 9 10\n\
intr 114930548 113199788 3 0 5 263 0 4 [... lots more numbers ...]\n\
ctxt 1990473\n\
btime 1062191376\n\
processes 2915\n\
procs_running 1\n\
procs_blocked 0\n";

#[test]
fn stat_sums_the_aggregate_line_and_counts_cpus() {
    let stat = parse_stat(STAT).unwrap();
    assert_eq!(stat.cpu_count, 3);
    assert_eq!(
        stat.cpu.total,
        10132153 + 290696 + 3084719 + 46828483 + 16683 + 25195
    );
    assert_eq!(stat.cpu.idle, 46828483 + 16683);
}

#[test]
fn stat_accepts_old_kernels_with_four_counters() {
    let stat = parse_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
    assert_eq!(stat.cpu, CpuTimes { total: 10, idle: 4 });
    assert_eq!(stat.cpu_count, 1);
}

#[test]
fn stat_garbage_is_an_error() {
    assert!(parse_stat("").is_err());
    assert!(parse_stat("cpu0 1 2 3 4\n").is_err());
    assert!(parse_stat("cpu 1 2\n").is_err());
    assert!(parse_stat("cpu 1 2 x 4\n").is_err());
}

#[test]
fn cpu_busy_percent_from_deltas() {
    let before = CpuTimes {
        total: 1000,
        idle: 800,
    };
    let after = CpuTimes {
        total: 1400,
        idle: 1100,
    };
    assert_eq!(after.busy_percent_since(&before), Some(25.0));
    assert_eq!(before.busy_percent_since(&after), None);
    assert_eq!(before.busy_percent_since(&before), None);
}

#[test]
fn loadavg_parses_three_numbers() {
    let load = parse_loadavg("0.52 1.25 3.00 2/1234 56789\n").unwrap();
    assert_eq!(load.one, 0.52);
    assert_eq!(load.five, 1.25);
    assert_eq!(load.fifteen, 3.0);
    assert!(parse_loadavg("0.5 1.0\n").is_err());
    assert!(parse_loadavg("a b c\n").is_err());
    assert!(parse_loadavg("nan 1 1\n").is_err());
}

#[test]
fn uptime_parses_seconds() {
    assert_eq!(parse_uptime("350735.47 234388.90\n").unwrap(), 350735.47);
    assert!(parse_uptime("").is_err());
    assert!(parse_uptime("-4 1").is_err());
    assert!(parse_uptime("soon").is_err());
}

#[test]
fn sysctl_numbers() {
    assert_eq!(parse_sysctl_u32("/proc/sys/vm/swappiness", "60\n"), Ok(60));
    assert_eq!(
        parse_sysctl_u32("/proc/sys/vm/overcommit_memory", "2\n"),
        Ok(2)
    );
    let err = parse_sysctl_u32("/proc/sys/vm/swappiness", "sixty\n").unwrap_err();
    assert!(err.to_string().contains("/proc/sys/vm/swappiness"), "{err}");
    assert!(parse_sysctl_u32("/proc/sys/vm/swappiness", "").is_err());
    assert!(parse_sysctl_u32("/proc/sys/vm/swappiness", "-1").is_err());
}

#[test]
fn hostname_is_trimmed_and_empty_is_none() {
    assert_eq!(parse_hostname("gpu-node-7\n"), Some("gpu-node-7".into()));
    assert_eq!(parse_hostname("\n"), None);
}

/// A real line from a Python process, with the kernel's 52 fields.
const PID_STAT: &str = "4242 (python3) S 4200 4242 4200 34816 4242 4194304 123456 0 12 0 \
1500 250 0 0 20 0 37 0 987654 12345678912 250000 18446744073709551615 94000000 94100000 \
140000000 0 0 0 0 16781312 134234626 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

#[test]
fn pid_stat_fields() {
    let stat = parse_pid_stat(PID_STAT).unwrap();
    assert_eq!(stat.pid, 4242);
    assert_eq!(stat.comm, "python3");
    assert_eq!(stat.state, 'S');
    assert_eq!(stat.ppid, 4200);
    assert_eq!(stat.flags, 4194304);
    assert!(!stat.is_kernel_thread());
    assert_eq!(stat.utime, 1500);
    assert_eq!(stat.stime, 250);
    assert_eq!(stat.cpu_ticks(), 1750);
    assert_eq!(stat.nice, 0);
    assert_eq!(stat.num_threads, 37);
    assert_eq!(stat.start_ticks, 987654);
    assert_eq!(stat.rss_pages, 250000);
}

#[test]
fn pid_stat_name_with_spaces_and_parentheses() {
    let text = PID_STAT.replace("(python3)", "(my (weird) proc)");
    let stat = parse_pid_stat(&text).unwrap();
    assert_eq!(stat.comm, "my (weird) proc");
    assert_eq!(stat.state, 'S');
    assert_eq!(stat.ppid, 4200);
    assert_eq!(stat.start_ticks, 987654);

    let text = PID_STAT.replace("(python3)", "(a) S 1 2 3)");
    let stat = parse_pid_stat(&text).unwrap();
    assert_eq!(stat.comm, "a) S 1 2 3");
    assert_eq!(stat.ppid, 4200);
}

#[test]
fn pid_stat_of_a_kernel_thread() {
    let text = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 3 0 0 20 0 1 0 2 0 0 \
18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
    let stat = parse_pid_stat(text).unwrap();
    assert!(stat.is_kernel_thread());
    assert_eq!(stat.rss_pages, 0);
}

#[test]
fn pid_stat_negative_nice() {
    let text = PID_STAT.replace(" 20 0 37 ", " 39 -19 37 ");
    assert_eq!(parse_pid_stat(&text).unwrap().nice, -19);
}

#[test]
fn pid_stat_garbage_is_an_error() {
    assert!(parse_pid_stat("").is_err());
    assert!(parse_pid_stat("4242 python3 S 1").is_err());
    assert!(parse_pid_stat("4242 (python3) S 4200 4242").is_err());
    assert!(parse_pid_stat(")( 1 2 3").is_err());
    let err = parse_pid_stat(&PID_STAT.replace(" 987654 ", " soon ")).unwrap_err();
    assert!(err.reason.contains("starttime"), "{err}");
    assert!(parse_pid_stat(&PID_STAT.replace(") S ", ") SS ")).is_err());
    assert!(parse_pid_stat(&PID_STAT.replace("4242 (", "x (")).is_err());
}

const PID_STATUS: &str = "Name:\tpython3\n\
Umask:\t0022\n\
State:\tS (sleeping)\n\
Tgid:\t4242\n\
Pid:\t4242\n\
PPid:\t4200\n\
Uid:\t1001\t1001\t1001\t1001\n\
Gid:\t1001\t1001\t1001\t1001\n\
VmPeak:\t 20000000 kB\n\
VmRSS:\t  1000000 kB\n\
Threads:\t37\n";

#[test]
fn pid_status_uid_and_rss() {
    let status = parse_pid_status(PID_STATUS).unwrap();
    assert_eq!(status.uid, 1001);
    assert_eq!(status.vm_rss_bytes, Some(1000000 * 1024));
}

#[test]
fn pid_status_of_kernel_thread_has_no_rss() {
    let status = parse_pid_status("Name:\tkworker/0:1\nUid:\t0\t0\t0\t0\n").unwrap();
    assert_eq!(status.uid, 0);
    assert_eq!(status.vm_rss_bytes, None);
}

#[test]
fn pid_status_garbage_is_an_error() {
    assert!(parse_pid_status("").is_err());
    assert!(parse_pid_status("Name:\tx\n").is_err());
    assert!(parse_pid_status("Uid:\n").is_err());
    assert!(parse_pid_status("Uid:\tme\n").is_err());
    assert!(parse_pid_status("Uid:\t1\nVmRSS:\tbig kB\n").is_err());
}

#[test]
fn cmdline_joins_arguments() {
    assert_eq!(
        parse_cmdline("python\0train.py\0--lr\x000.1\0"),
        Some("python train.py --lr 0.1".into())
    );
    // setproctitle-style rewrites have no NULs and may lack the final one.
    assert_eq!(
        parse_cmdline("ray::Worker idle"),
        Some("ray::Worker idle".into())
    );
    // An empty argument inside is kept as an empty word.
    assert_eq!(parse_cmdline("echo\0\0x\0"), Some("echo  x".into()));
}

#[test]
fn cmdline_empty_is_none() {
    assert_eq!(parse_cmdline(""), None);
    assert_eq!(parse_cmdline("\0"), None);
}

#[test]
fn environ_launch_variables() {
    let text = "HOME=/root\0CUDA_VISIBLE_DEVICES=0,1\0RANK=3\0LOCAL_RANK=1\0\
WORLD_SIZE=8\0TORCHELASTIC_RUN_ID=job-17\0MASTER_ADDR=10.0.0.1\0MASTER_PORT=29500\0\
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\0PATH=/usr/bin\0";
    let env = parse_environ(text);
    assert_eq!(env.cuda_visible_devices.as_deref(), Some("0,1"));
    assert_eq!(env.rank, Some(3));
    assert_eq!(env.local_rank, Some(1));
    assert_eq!(env.world_size, Some(8));
    assert_eq!(env.torchelastic_run_id.as_deref(), Some("job-17"));
    assert_eq!(env.master_addr.as_deref(), Some("10.0.0.1"));
    assert_eq!(env.master_port.as_deref(), Some("29500"));
    assert_eq!(
        env.pytorch_cuda_alloc_conf.as_deref(),
        Some("expandable_segments:True")
    );
}

#[test]
fn environ_missing_and_bad_values() {
    assert_eq!(parse_environ(""), LaunchEnv::default());
    let env = parse_environ("RANK=zero\0junk-without-equals\0CUDA_VISIBLE_DEVICES=\0");
    assert_eq!(env.rank, None);
    // Set but empty hides every GPU, which is not the same as unset.
    assert_eq!(env.cuda_visible_devices.as_deref(), Some(""));
    // A value may itself hold '='.
    let env = parse_environ("PYTORCH_CUDA_ALLOC_CONF=a=b\0");
    assert_eq!(env.pytorch_cuda_alloc_conf.as_deref(), Some("a=b"));
}

#[test]
fn children_list() {
    assert_eq!(parse_children("1001 1002 "), Ok(vec![1001, 1002]));
    assert_eq!(parse_children(""), Ok(vec![]));
    assert!(parse_children("1001 x").is_err());
}

#[test]
fn readers_report_a_missing_file_as_gone() {
    let root = Path::new("/nonexistent-torchtop-proc-root");
    assert!(matches!(
        HostFiles::new(root).meminfo(),
        Err(ProcError::Gone(_))
    ));
    assert!(matches!(read_pid_stat(root, 1), Err(ProcError::Gone(_))));
}

#[test]
fn readers_work_on_the_real_proc() {
    let root = Path::new("/proc");
    let me = std::process::id();
    let stat = read_pid_stat(root, me).unwrap();
    assert_eq!(stat.pid, me);
    assert!(stat.num_threads >= 1);
    let mut files = HostFiles::new(root);
    for _ in 0..2 {
        assert!(files.meminfo().unwrap().total_bytes.unwrap() > 0);
        assert!(files.stat().unwrap().cpu_count >= 1);
        assert!(files.uptime().unwrap() > 0.0);
        assert!(files.loadavg().unwrap().1.is_some());
        assert!(files.swappiness().is_ok());
    }
    assert_eq!(files.open_count(), 5, "kept open and read again in place");
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    assert_eq!(read_pid_status(root, me).unwrap().uid, uid);
}

#[test]
fn environ_entries() {
    let env = b"A=1\0TORCHTOP_AGENT_DIR=/x/y\0TORCHTOP_AGENT_DIRX=no\0B";
    assert_eq!(
        environ_lookup(env, "TORCHTOP_AGENT_DIR"),
        Some(std::ffi::OsString::from("/x/y"))
    );
    assert_eq!(environ_lookup(env, "B"), None);
    assert_eq!(environ_lookup(env, "C"), None);
}

#[test]
fn pid_status_fields_for_attach() {
    let text = "Name:\tpython3\nState:\tS (sleeping)\nTracerPid:\t77\nUid:\t1\t2\t3\t4\n\
                CapEff:\t0000000000080000\n";
    let status = parse_pid_status(text).unwrap();
    assert_eq!(status.name.as_deref(), Some("python3"));
    assert_eq!((status.state, status.tracer_pid), (Some('S'), 77));
    assert_eq!((status.uid, status.uids), (1, Some([1, 2, 3, 4])));
    assert_eq!(status.cap_eff, Some(1 << 19));
    assert_eq!(parse_pid_status("Uid:\t1\t2\n").unwrap().uids, None);
}

#[test]
fn stat_files_beyond_the_limit_are_read_by_path() {
    let dir = tempfile::tempdir().unwrap();
    for pid in [10, 11, 12] {
        std::fs::create_dir_all(dir.path().join(pid.to_string())).unwrap();
        let stat = format!(
            "{pid} (p) S 1 {pid} 1 0 -1 0 0 0 0 0 {pid} 0 0 0 20 0 1 0 \
             500 1000 {pid} 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0\n"
        );
        std::fs::write(dir.path().join(format!("{pid}/stat")), stat).unwrap();
    }
    let mut files = OpenStatFiles::keeping_at_most(2);
    for pid in [10, 11, 12] {
        assert_eq!(
            files.read(dir.path(), pid).unwrap().rss_pages,
            u64::from(pid)
        );
    }
    assert_eq!(
        files.kept_open(),
        2,
        "two kept open, the third read by path"
    );
    // The kept-open ones are read in place: the new text is there.
    std::fs::write(
        dir.path().join("10/stat"),
        "10 (p) S 1 10 1 0 -1 0 0 0 0 0 10 0 0 0 20 0 1 0 500 1000 99 0 0 0 0 0 0 0 0 0 0 0 0 \
         17 0 0 0\n",
    )
    .unwrap();
    assert_eq!(files.read(dir.path(), 10).unwrap().rss_pages, 99);
    assert_eq!(files.read(dir.path(), 12).unwrap().rss_pages, 12);
    assert!(files.read(dir.path(), 13).is_err(), "no such process");
}
