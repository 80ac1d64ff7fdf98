//! Tests of the injector against real Python processes.

use super::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::sys::proc::parse_maps;

/// Seizes `pid`, stops it, runs `f` on it stopped, detaches.
#[cfg(target_arch = "x86_64")]
fn while_stopped<T>(pid: u32, f: impl FnOnce(&ptrace::Tracee) -> T) -> T {
    let t = ptrace::Tracee::seize(pid).unwrap();
    t.interrupt().unwrap();
    let deadline = Instant::now() + crate::test_ci::PATIENCE;
    imp::wait_for_stop(&t, deadline, &mut Vec::new(), |s| s == ptrace::Stop::Event).unwrap();
    let out = f(&t);
    t.detach().unwrap();
    out
}

/// Save, scramble, restore: a later stop shows exactly the first state, general registers
/// and the whole XSAVE area (a thread blocked in the kernel does not change them itself).
#[cfg(target_arch = "x86_64")]
#[test]
fn restore_puts_back_every_register_and_the_extended_state() {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id();
    let deadline = Instant::now() + crate::test_ci::PATIENCE;
    while std::fs::read_to_string(format!("/proc/{pid}/syscall")).map_or(true, |s| {
        !s.starts_with(&libc::SYS_clock_nanosleep.to_string())
    }) {
        assert!(Instant::now() < deadline, "sleep never slept");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (before, restored) = while_stopped(pid, |t| {
        let saved = arch::save(t).unwrap();
        arch::scramble(t, &saved).unwrap();
        let scrambled = arch::save(t).unwrap();
        assert_ne!(arch::state_bytes(&scrambled), arch::state_bytes(&saved));
        arch::restore(t, &saved).unwrap();
        let restored = arch::save(t).unwrap();
        (arch::state_bytes(&saved), arch::state_bytes(&restored))
    });
    assert!(before == restored, "the state differs right after restore");
    // At the next stop the interrupted sleep may have been resumed through
    // restart_syscall, which the kernel records in orig_rax; everything else is the same.
    let after = while_stopped(pid, |t| arch::state_bytes(&arch::save(t).unwrap()));
    assert_eq!(before.len(), after.len());
    let orig_rax = std::mem::offset_of!(libc::user_regs_struct, orig_rax);
    let differs: Vec<usize> = (0..before.len())
        .filter(|&i| before[i] != after[i] && !(orig_rax..orig_rax + 8).contains(&i))
        .collect();
    assert!(
        differs.is_empty(),
        "the state differs at the next stop, at bytes {differs:?}"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "sleep is still sleeping"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// A child killed and reaped when the test ends, passed or not (a stopped one would linger).
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A review: a process stopped by SIGSTOP was resumed by the injector (its group-stop
/// answered with PTRACE_CONT), waited on until the deadline, and left traced and running.
#[test]
fn a_stopped_process_is_refused_and_left_stopped() {
    let child = KilledOnDrop(Command::new("sleep").arg("60").spawn().unwrap());
    let pid = child.0.id();
    let state = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
    };
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    crate::test_ci::wait_until("sleep to stop", || state() == 'T');
    let t = ptrace::Tracee::seize(pid).unwrap();
    t.interrupt().unwrap();
    // Only a bound for the old code, which waited for a stop that never came.
    let deadline = Instant::now() + Duration::from_secs(3);
    let refused = imp::wait_for_stop(&t, deadline, &mut Vec::new(), |s| s == ptrace::Stop::Event)
        .unwrap_err();
    t.detach().unwrap();
    assert!(refused.contains("is stopped (SIGSTOP"), "{refused}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("TracerPid:\t0\n"), "{status}");
    // Detached, it runs a moment to go back into its job-control stop.
    crate::test_ci::wait_until("the process to be stopped again", || state() == 'T');
}

/// A call that never returns (libc's `pause` in place of Py_AddPendingCall) is abandoned at
/// the deadline, and the target's registers are put back: its computation goes on exactly.
#[test]
fn a_call_that_never_returns_is_abandoned_and_the_target_restored() {
    let Some(python) = ["/usr/bin/python3.11", "/usr/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
    else {
        crate::test_ci::skip_or_fail("no system python3 (/usr/bin/python3)");
        return;
    };
    let code = "n = 0; total = 0\n\
                while True:\n    \
                    n += 1; total += n * 3\n    \
                    if n % 20000 == 0: print(n, total, flush=True)\n";
    let mut child = Command::new(python)
        .args(["-c", code])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let maps = parse_maps(&std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap());
    let pause = elf::runtime_symbol(pid, &maps, "libc", "pause").expect("libc's pause");
    let never_returns = PythonImage {
        path: "libc".to_string(),
        add_pending_call: pause,
        run_simple_string: 0,
        version: None,
    };
    let held = crate::sys::pidfd::HeldProcess::hold(pid).unwrap();
    let err = queue_code(
        &held,
        &never_returns,
        &maps,
        "pass",
        Duration::from_millis(300),
    )
    .unwrap_err();
    assert!(err.text().contains("did not return"), "{err:?}");
    assert!(err.text().contains("registers restored"), "{err:?}");
    for _ in 0..20 {
        line.clear();
        out.read_line(&mut line).unwrap();
        let fields: Vec<u128> = line
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        assert_eq!(fields[1], 3 * fields[0] * (fields[0] + 1) / 2, "{line}");
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A review: attach read /proc of the process it checked, then seized the bare pid, so a target
/// that exited while root's attach was held up (a FIFO where its libpython was) had its pid
/// taken by a root process, and the agent went into that one. The injector now checks, after
/// the seize, that the process it holds by its pidfd still runs.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn a_pid_taken_by_another_process_is_never_seized() {
    if crate::sys::effective_uid() != 0 {
        crate::test_ci::skip_or_fail("this test needs root, to choose the next pid");
        return;
    }
    let mut first = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = first.id();
    let held = crate::sys::pidfd::HeldProcess::hold(pid).unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    // The next process forked gets `pid` once the kernel's last pid is set below it; another
    // test forking at that moment can take it first, so try again.
    let mut second = None;
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let mut child = Command::new("sleep").arg("60").spawn().unwrap();
        if child.id() == pid {
            second = Some(child);
            break;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut second = second.expect("a process with the first one's pid");
    let image = PythonImage {
        path: "none".to_string(),
        add_pending_call: 0,
        run_simple_string: 0,
        version: None,
    };
    let err = queue_code(&held, &image, &[], "pass", Duration::from_secs(1)).unwrap_err();
    assert!(matches!(err, InjectError::Gone(_)), "{err:?}");
    assert!(err.text().contains("nothing was injected"), "{err:?}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("TracerPid:\t0\n"), "{status}");
    assert!(
        !status.contains("State:\tt") && !status.contains("State:\tT"),
        "left stopped: {status}"
    );
    let _ = second.kill();
    let _ = second.wait();
}

/// A review: of 30,431 SIGRTMIN a target got while held, one was given back (they were kept
/// as one, like standard signals), and then none (rustix's `Signal` refused the number).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn held_real_time_signals_are_each_given_back_and_standard_ones_once() {
    let mut held = Vec::new();
    for signal in [libc::SIGUSR1, libc::SIGUSR1, libc::SIGCHLD] {
        imp::remember(&mut held, signal);
    }
    for _ in 0..3 {
        imp::remember(&mut held, libc::SIGRTMIN());
    }
    assert_eq!(
        held,
        [
            libc::SIGUSR1,
            libc::SIGCHLD,
            libc::SIGRTMIN(),
            libc::SIGRTMIN(),
            libc::SIGRTMIN()
        ]
    );
    // glibc's SIGRTMIN is 34; the kernel queues from 32 (a review: 32 and 33 were kept once).
    held.clear();
    for _ in 0..2 {
        imp::remember(&mut held, 32);
    }
    assert_eq!(held, [32, 32]);
    for _ in 0..10_000 {
        imp::remember(&mut held, libc::SIGRTMIN() + 1);
    }
    assert_eq!(held.len(), 4096, "bounded");
}

/// A review: a target that ran another program (`execve`) after its maps were read would be
/// called at the old program's addresses. The check made with the thread stopped, on this
/// process's own map.
#[test]
fn a_file_no_longer_mapped_where_it_was_is_refused() {
    let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
    let mapped = (maps.iter())
        .find(|m| m.inode != 0 && m.path.starts_with('/'))
        .expect("a mapped file")
        .clone();
    let image = PythonImage {
        path: mapped.path.clone(),
        add_pending_call: 0,
        run_simple_string: 0,
        version: None,
    };
    let pid = std::process::id();
    assert_eq!(imp::still_mapped(pid, &image, &maps), Ok(()));
    let mut moved = maps.clone();
    for line in moved.iter_mut().filter(|m| m.path == mapped.path) {
        line.inode += 1;
    }
    let refused = imp::still_mapped(pid, &image, &moved).unwrap_err();
    assert!(refused.contains("no longer maps"), "{refused}");
}
