//! The ptrace injector against real python3 children, on every CPython this machine has: code
//! queued with `Py_AddPendingCall` runs, and the target's computation, sleeps and blocking
//! reads go on undisturbed after many injections.

use crate::common::skip_or_fail;
use crate::launch_support;

use std::io::{BufRead, Write};
use std::time::Duration;

use launch_support::{eventually, first_line, interpreters, spawn_python};
use torchtop::launch::inject_python;

/// How long an injection or a wait on the child may take before the test fails: a guard only.
const TIMEOUT: Duration = crate::common::PATIENCE;

fn pythons_or_skip() -> Vec<std::path::PathBuf> {
    let found = interpreters();
    if found.is_empty() {
        skip_or_fail("no python3 is installed");
    }
    for python in &found {
        println!("testing with {}", python.display());
    }
    found
}

/// The system call a thread is blocked in, from /proc/PID/syscall.
fn blocked_in(pid: u32) -> Option<i64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[test]
fn a_computation_survives_many_injections_exactly() {
    const INJECTIONS: u64 = 25;
    let code = format!(
        "import sys\n\
         n = 0; total = 0; half = 0.0\n\
         print('ready', flush=True)\n\
         while True:\n    \
             n += 1; total += n * n; half += n * 0.5\n    \
             if n % 5000 == 0:\n        \
                 count = getattr(sys, '_tt_count', 0)\n        \
                 print(n, total, repr(half), count, flush=True)\n        \
                 if count >= {INJECTIONS}: break\n"
    );
    for python in pythons_or_skip() {
        let (mut child, mut out) = spawn_python(&python, &code);
        assert_eq!(first_line(&mut out), "ready");
        for _ in 0..INJECTIONS {
            inject_python(
                child.pid(),
                "import sys; sys._tt_count = getattr(sys, '_tt_count', 0) + 1",
                TIMEOUT,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
        }
        let mut checked = 0;
        let mut last_count = 0;
        for line in out.lines() {
            let line = line.unwrap();
            let fields: Vec<&str> = line.split_whitespace().collect();
            let n: u128 = fields[0].parse().unwrap();
            assert_eq!(
                fields[1],
                (n * (n + 1) * (2 * n + 1) / 6).to_string(),
                "{line}"
            );
            assert_eq!(
                fields[2].parse::<f64>().unwrap(),
                (n * (n + 1)) as f64 / 4.0,
                "{line}"
            );
            last_count = fields[3].parse().unwrap();
            checked += 1;
        }
        assert_eq!(last_count, INJECTIONS, "every queued call ran once");
        let status = child.0.wait().unwrap();
        assert!(status.success(), "{}: {status}", python.display());
        println!(
            "{}: {checked} checkpoints exact after {INJECTIONS} injections",
            python.display()
        );
    }
}

#[test]
fn a_sleep_in_progress_runs_its_full_length_and_then_the_code_runs() {
    let code = "import sys, time\n\
                print('ready', flush=True)\n\
                start = time.monotonic()\n\
                time.sleep(1.5)\n\
                print('slept %.3f' % (time.monotonic() - start), flush=True)\n\
                while not hasattr(sys, '_tt'):\n    time.sleep(0.01)\n\
                print('ran', sys._tt, flush=True)\n";
    for python in pythons_or_skip() {
        let (child, mut out) = spawn_python(&python, code);
        assert_eq!(first_line(&mut out), "ready");
        let nanosleep = libc::SYS_clock_nanosleep;
        assert!(
            eventually(TIMEOUT, || blocked_in(child.pid()) == Some(nanosleep)),
            "the child never blocked in clock_nanosleep"
        );
        inject_python(child.pid(), "import sys; sys._tt = 42", TIMEOUT).unwrap();
        let slept: f64 = first_line(&mut out)
            .strip_prefix("slept ")
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            slept >= 1.5,
            "{}: the sleep was cut short: {slept}",
            python.display()
        );
        assert_eq!(first_line(&mut out), "ran 42");
    }
}

/// The system calls Python's select.select may block in.
fn select_syscalls() -> &'static [i64] {
    #[cfg(target_arch = "x86_64")]
    return &[
        libc::SYS_pselect6,
        libc::SYS_ppoll,
        libc::SYS_select,
        libc::SYS_poll,
    ];
    #[cfg(not(target_arch = "x86_64"))]
    return &[libc::SYS_pselect6, libc::SYS_ppoll];
}

#[test]
fn blocking_reads_and_selects_resume_and_see_their_data() {
    let code = "import select, sys, time\n\
                print('ready', flush=True)\n\
                r, _, _ = select.select([sys.stdin], [], [], 60)\n\
                print('select saw input', bool(r), flush=True)\n\
                line = sys.stdin.readline()\n\
                print('read', line.strip(), flush=True)\n\
                second = sys.stdin.readline()\n\
                while getattr(sys, '_tt', None) != 'two':\n    time.sleep(0.01)\n\
                print('read', second.strip(), sys._tt, flush=True)\n";
    for python in pythons_or_skip() {
        let (mut child, mut out) = spawn_python(&python, code);
        assert_eq!(first_line(&mut out), "ready");
        let pid = child.pid();
        let select_calls = select_syscalls();
        assert!(
            eventually(TIMEOUT, || blocked_in(pid)
                .is_some_and(|s| select_calls.contains(&s))),
            "the child never blocked in select"
        );
        inject_python(pid, "import sys; sys._tt = 'one'", TIMEOUT).unwrap();
        let mut stdin = child.0.stdin.take().unwrap();
        stdin.write_all(b"first\n").unwrap();
        assert_eq!(first_line(&mut out), "select saw input True");
        assert_eq!(first_line(&mut out), "read first");
        assert!(
            eventually(TIMEOUT, || blocked_in(pid) == Some(libc::SYS_read)),
            "the child never blocked in read"
        );
        inject_python(pid, "import sys; sys._tt = 'two'", TIMEOUT).unwrap();
        stdin.write_all(b"second\n").unwrap();
        assert_eq!(first_line(&mut out), "read second two");
    }
}

#[test]
fn a_process_that_is_not_python_is_refused_untouched() {
    let child = launch_support::Killed(
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap(),
    );
    let err = inject_python(child.pid(), "pass", TIMEOUT).unwrap_err();
    assert!(err.contains("is not a Python interpreter"), "{err}");
}
