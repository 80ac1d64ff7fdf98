//! A gdb-free injector: makes a running CPython queue a string of code for its main thread,
//! with ptrace alone (x86_64 and aarch64).
//!
//! Steps, all on the target's main thread:
//! 1. `PTRACE_SEIZE`, `PTRACE_INTERRUPT`, wait for the stop (with a deadline);
//! 2. save the general registers and the whole extended (FPU/vector) state;
//! 3. map one anonymous page range: single-step a `syscall`/`svc` instruction that is already in
//!    the target's code, with the registers of an `mmap` call (no code is ever written);
//! 4. write the code string there;
//! 5. call `Py_AddPendingCall(PyRun_SimpleString, string)` with a return address of 0, on the
//!    thread's stack below the red zone, and run until the fault at pc 0;
//! 6. restore every register and the extended state, detach, and re-send any signal that
//!    arrived meanwhile.
//!
//! The target is held by its pidfd ([`HeldProcess`]): right after the seize it must still run,
//! so the thread stopped is the process that was checked, not one that took its pid; the
//! signals are re-sent through the pidfd.
//!
//! Py_AddPendingCall is safe without the GIL. The interpreter runs the code with the GIL at its
//! next bytecode boundary on the main thread, so a main thread stuck in a C call or a long sleep
//! delays it. The string's mapping stays in the target (it must outlive the pending call).
//! Every failure after the seize restores the registers (once the thread is stopped) and
//! detaches.

use std::time::{Duration, Instant};

use crate::sys::pidfd::HeldProcess;
use crate::sys::proc::MapLine;

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod elf;
mod ptrace;
#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "aarch64")]
use aarch64 as arch;
#[cfg(target_arch = "x86_64")]
use x86_64 as arch;

pub(crate) use elf::{find_python, PythonImage};

/// Why an injection failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InjectError {
    /// ptrace was refused (EPERM): gdb would be refused too.
    Denied(String),
    /// Anything else: another method may still work.
    Failed(String),
    /// The process exited, and its pid may be another process's: no method may try it.
    Gone(String),
}

impl InjectError {
    pub(crate) fn text(&self) -> &str {
        match self {
            InjectError::Denied(t) | InjectError::Failed(t) | InjectError::Gone(t) => t,
        }
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn queue_code(
    held: &HeldProcess,
    _image: &PythonImage,
    _maps: &[MapLine],
    _code: &str,
    _timeout: Duration,
) -> Result<(), InjectError> {
    Err(InjectError::Failed(format!(
        "The ptrace injector supports x86_64 and aarch64 only; it cannot start code in process {} on this CPU.",
        held.pid()
    )))
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use imp::queue_code;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod imp {
    use super::ptrace::{Stop, Tracee};
    use super::{arch, Duration, HeldProcess, InjectError, Instant, MapLine, PythonImage};

    /// The most real-time signals held for giving back: a sender that floods the thread during
    /// the injection costs this many entries, never more.
    const MAX_HELD_SIGNALS: usize = 4096;
    /// The kernel's first real-time signal, from which signals queue: glibc keeps 32 and 33
    /// for itself, so its SIGRTMIN is 34, but those two queue all the same.
    const KERNEL_SIGRTMIN: i32 = 32;
    /// How much of the target's code is scanned for a system-call instruction.
    const GADGET_SCAN_LIMIT: usize = 64 << 20;
    const PROT_READ_WRITE: u64 = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    const MAP_PRIVATE_ANON: u64 = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;

    fn failed(pid: u32, what: &str, e: impl std::fmt::Display) -> InjectError {
        InjectError::Failed(format!("Cannot {what} in process {pid}: {e}."))
    }

    /// Queues `code` (Python source, no NUL byte) to run on the main thread of `pid` through
    /// `Py_AddPendingCall(PyRun_SimpleString, code)`. Returns once it is queued, not run.
    pub(crate) fn queue_code(
        held: &HeldProcess,
        image: &PythonImage,
        maps: &[MapLine],
        code: &str,
        timeout: Duration,
    ) -> Result<(), InjectError> {
        let pid = held.pid();
        if code.as_bytes().contains(&0) {
            return Err(InjectError::Failed(
                "The code to inject contains a NUL byte.".to_string(),
            ));
        }
        let tracee = Tracee::seize(pid).map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) => {
                InjectError::Denied(format!("ptrace is not permitted on process {pid} ({e})."))
            }
            Some(libc::ESRCH) => InjectError::Failed(format!("Process {pid} has exited.")),
            _ => failed(pid, "attach with ptrace", e),
        })?;
        // The process seized, by a pidfd of its own: while traced it keeps its pid, so this
        // names it, and the signals taken from it go back to it and to no other.
        let seized = HeldProcess::hold(pid).ok();
        let deadline = Instant::now() + timeout;
        let mut signals = Vec::new();
        // Still running now, the process checked had its pid all along: it is the one seized.
        let same = held.is_running();
        let outcome = if same {
            stop_and_inject(&tracee, image, maps, code, deadline, &mut signals)
        } else {
            // Another process has the pid: stop it only to let it go (a running tracee cannot
            // be detached), untouched.
            let _ = stop(&tracee, deadline, &mut signals);
            Err(InjectError::Gone(format!(
                "Process {pid} exited before it could be stopped, and its pid may be another process's now; nothing was injected."
            )))
        };
        let detached = tracee.detach();
        // The process held all along, or the one that took its pid, held since the seize.
        let giver = if same { Some(held) } else { seized.as_ref() };
        for signal in signals {
            // These arrived while we held the thread; ptrace took them off its queue.
            match giver {
                Some(giver) => drop(giver.signal(signal)),
                // A thread of another process has the pid (a pidfd names processes only): it
                // is still the one seized a moment ago.
                // SAFETY: tkill(2) with plain integers; a failure changes nothing.
                None => drop(unsafe { libc::syscall(libc::SYS_tkill, pid, signal) }),
            }
        }
        match (outcome, detached) {
            (Err(e), _) => Err(e),
            (Ok(()), Err(e)) => Err(failed(pid, "detach", e)),
            (Ok(()), Ok(())) => Ok(()),
        }
    }

    fn stop_and_inject(
        t: &Tracee,
        image: &PythonImage,
        maps: &[MapLine],
        code: &str,
        deadline: Instant,
        signals: &mut Vec<i32>,
    ) -> Result<(), InjectError> {
        let pid = t.pid();
        stop(t, deadline, signals)?;
        still_mapped(pid, image, maps)
            .map_err(|e| InjectError::Failed(format!("{e} Its registers were not touched.")))?;
        let saved = arch::save(t).map_err(|e| failed(pid, "save the registers", e))?;
        let outcome = inject_stopped(t, &saved, image, maps, code, deadline, signals);
        if let Err(StepError {
            text,
            stopped: false,
        }) = outcome
        {
            return Err(InjectError::Failed(text));
        }
        let restored =
            arch::restore(t, &saved).map_err(|e| failed(pid, "restore the registers", e));
        match outcome {
            Err(e) => Err(InjectError::Failed(match restored {
                Ok(()) => e.text,
                Err(r) => format!("{} {}", e.text, r.text()),
            })),
            Ok(()) => restored,
        }
    }

    /// Checks, with the thread stopped, that the file whose addresses were read is mapped
    /// where it was: a process that ran another program (`execve`) since its maps were read
    /// has none of them, and would be called at addresses of a program no longer there.
    pub(super) fn still_mapped(
        pid: u32,
        image: &PythonImage,
        maps: &[MapLine],
    ) -> Result<(), String> {
        let now = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map(|text| crate::sys::proc::parse_maps(&text))
            .map_err(|e| format!("Cannot read the memory map of process {pid} again: {e}."))?;
        let kept = (maps.iter())
            .filter(|m| m.path == image.path)
            .all(|m| now.contains(m));
        if kept {
            Ok(())
        } else {
            Err(format!(
                "Process {pid} no longer maps {} where it did (it ran another program?); nothing was injected.",
                crate::format::escape(&image.path)
            ))
        }
    }

    /// Interrupts the seized thread and waits for it to stop, its registers untouched.
    fn stop(t: &Tracee, deadline: Instant, signals: &mut Vec<i32>) -> Result<(), InjectError> {
        t.interrupt()
            .map_err(|e| failed(t.pid(), "interrupt the main thread", e))?;
        wait_for_stop(t, deadline, signals, |stop| stop == Stop::Event)
            .map_err(|e| InjectError::Failed(format!("{e} Its registers were not touched.")))
    }

    /// An injection step failed; `stopped` says whether the thread is still in a ptrace stop
    /// (so its registers can and must be restored).
    struct StepError {
        text: String,
        stopped: bool,
    }

    /// A failure that leaves the thread stopped.
    fn halted(text: String) -> StepError {
        StepError {
            text,
            stopped: true,
        }
    }

    /// Runs the mmap and the call with the thread stopped; leaves it stopped on return, or
    /// says it could not.
    fn inject_stopped(
        t: &Tracee,
        saved: &arch::Saved,
        image: &PythonImage,
        maps: &[MapLine],
        code: &str,
        deadline: Instant,
        signals: &mut Vec<i32>,
    ) -> Result<(), StepError> {
        let pid = t.pid();
        let base = &saved.regs;
        let gadget = find_gadget(t, maps, arch::pc(base)).ok_or_else(|| {
            halted(format!(
                "Found no system-call instruction in the code of process {pid}."
            ))
        })?;
        let len = (code.len() as u64 + 1).next_multiple_of(page_size());
        let args = [0, len, PROT_READ_WRITE, MAP_PRIVATE_ANON, u64::MAX, 0];
        let regs = arch::syscall_regs(base, gadget, arch::SYS_MMAP, args);
        set(t, &regs)?;
        arch::forget_syscall(t).map_err(|e| {
            halted(format!(
                "Cannot cancel a system-call restart in process {pid}: {e}."
            ))
        })?;
        let after = run(t, Resume::Step, libc::SIGTRAP, deadline, signals)?;
        let addr = arch::syscall_result(&after);
        if addr >= u64::MAX - 4095 || arch::pc(&after) != gadget + arch::SYSCALL_INSN.len() as u64 {
            return Err(halted(format!(
                "mmap in process {pid} failed (result {addr:#x})."
            )));
        }
        let mut bytes = code.as_bytes().to_vec();
        bytes.push(0);
        t.write_mem(addr, &bytes)
            .map_err(|e| halted(format!("Cannot write the code into process {pid}: {e}.")))?;

        let (regs, return_slot) =
            arch::call_regs(base, image.add_pending_call, image.run_simple_string, addr);
        if let Some(slot) = return_slot {
            t.write_mem(slot, &0u64.to_ne_bytes())
                .map_err(|e| halted(format!("Cannot write to the stack of process {pid}: {e}.")))?;
        }
        set(t, &regs)?;
        let after = run(t, Resume::Cont, libc::SIGSEGV, deadline, signals)?;
        if arch::pc(&after) != 0 {
            return Err(halted(format!(
                "Py_AddPendingCall crashed in process {pid} at {:#x}; its registers were restored.",
                arch::pc(&after)
            )));
        }
        match arch::return_value(&after) as u32 as i32 {
            0 => Ok(()),
            rc => Err(halted(format!(
                "Py_AddPendingCall in process {pid} returned {rc}: its queue of pending calls is full; try again."
            ))),
        }
    }

    fn set(t: &Tracee, regs: &arch::Regs) -> Result<(), StepError> {
        arch::set_regs(t, regs).map_err(|e| {
            halted(format!(
                "Cannot set the registers of process {}: {e}.",
                t.pid()
            ))
        })
    }

    fn page_size() -> u64 {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
    }

    #[derive(Clone, Copy)]
    enum Resume {
        Step,
        Cont,
    }

    /// Resumes until the thread stops with `wanted` and returns its registers. Asynchronous
    /// signals are held back and re-sent after detaching; a fault is an error. On the deadline
    /// the thread is interrupted again so that its registers can be restored.
    fn run(
        t: &Tracee,
        how: Resume,
        wanted: i32,
        deadline: Instant,
        signals: &mut Vec<i32>,
    ) -> Result<arch::Regs, StepError> {
        let pid = t.pid();
        loop {
            let resumed = match how {
                Resume::Step => t.step(),
                Resume::Cont => t.cont(),
            };
            resumed.map_err(|e| halted(format!("Cannot resume process {pid}: {e}.")))?;
            let stop = match t.wait_stop(deadline) {
                Ok(Some(stop)) => stop,
                Ok(None) => return Err(interrupt_late(t, signals)),
                Err(e) => return Err(halted(format!("Cannot wait for process {pid}: {e}."))),
            };
            match stop {
                Stop::Signal(s) if s == wanted => {
                    return arch::get_regs(t).map_err(|e| {
                        halted(format!("Cannot read the registers of process {pid}: {e}."))
                    })
                }
                Stop::Signal(s) if is_fault(s) => {
                    return Err(halted(format!(
                        "The injected call faulted in process {pid} (signal {s}); its registers were restored."
                    )))
                }
                Stop::Signal(s) => remember(signals, s),
                Stop::Event | Stop::Group => {}
                Stop::Gone(how, n) => {
                    return Err(StepError {
                        text: format!("Process {pid} {how} {n} during the injection."),
                        stopped: false,
                    })
                }
            }
        }
    }

    /// A signal the thread got while held, to give back after the detach. Standard ones
    /// pending at once are one, as the kernel keeps them; real-time ones queue, each kept (a
    /// review counted 30,431 held and one given back), up to [`MAX_HELD_SIGNALS`]. Each is
    /// given back as sent by torchtop: its sender, and a `sigqueue` value, are lost (glibc's
    /// own signals 32 and 33 check their sender, and ignore such a one).
    pub(super) fn remember(signals: &mut Vec<i32>, signal: i32) {
        let queued = signal >= KERNEL_SIGRTMIN && signals.len() < MAX_HELD_SIGNALS;
        if queued || !signals.contains(&signal) {
            signals.push(signal);
        }
    }

    fn is_fault(signal: i32) -> bool {
        matches!(
            signal,
            libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP
        )
    }

    /// The call did not come back in time: stop the thread again so it can be restored.
    fn interrupt_late(t: &Tracee, signals: &mut Vec<i32>) -> StepError {
        let pid = t.pid();
        let grace = Instant::now() + Duration::from_secs(5);
        let stopped = t.interrupt().is_ok()
            && wait_for_stop(t, grace, signals, |s| {
                matches!(s, Stop::Event | Stop::Group)
            })
            .is_ok();
        if stopped {
            halted(format!(
                "Py_AddPendingCall did not return in process {pid} in time (its lock may be held); the call was abandoned and the registers restored."
            ))
        } else {
            StepError {
                text: format!(
                    "Process {pid} did not stop again after a call that did not return; torchtop could not restore its registers."
                ),
                stopped: false,
            }
        }
    }

    /// Waits for a stop that `done` accepts; signals met on the way are held back.
    pub(super) fn wait_for_stop(
        t: &Tracee,
        deadline: Instant,
        signals: &mut Vec<i32>,
        done: impl Fn(Stop) -> bool,
    ) -> Result<(), String> {
        let pid = t.pid();
        loop {
            match t.wait_stop(deadline) {
                Ok(Some(stop)) if done(stop) => return Ok(()),
                Ok(Some(Stop::Gone(how, n))) => return Err(format!("Process {pid} {how} {n}.")),
                // Stopped by job control before it was seized (SIGSTOP, Ctrl-Z): resuming it
                // would run it behind its user's back; a detach leaves it stopped.
                Ok(Some(Stop::Group)) => {
                    return Err(format!(
                        "Process {pid} is stopped (SIGSTOP, or Ctrl-Z in its terminal); continue it with `kill -CONT {pid}` and attach again."
                    ))
                }
                Ok(Some(Stop::Signal(s))) => {
                    remember(signals, s);
                    t.cont().map_err(|e| format!("Cannot resume process {pid}: {e}."))?;
                }
                Ok(Some(_)) => t.cont().map_err(|e| format!("Cannot resume process {pid}: {e}."))?,
                Ok(None) => {
                    return Err(format!(
                        "Process {pid} did not stop for ptrace in time (it may be in an uninterruptible kernel call)."
                    ))
                }
                Err(e) => return Err(format!("Cannot wait for process {pid}: {e}.")),
            }
        }
    }

    /// A system-call instruction already in the target's executable memory (the vDSO first),
    /// other than at `avoid` (the thread's own pc: on aarch64 the kernel would turn a call
    /// there into a restart of the interrupted call).
    fn find_gadget(t: &Tracee, maps: &[MapLine], avoid: u64) -> Option<u64> {
        let mut order: Vec<&MapLine> = maps
            .iter()
            .filter(|m| m.executable() && m.path != "[vsyscall]" && m.path != "[uprobes]")
            .collect();
        order.sort_by_key(|m| m.path != "[vdso]");
        let mut budget = GADGET_SCAN_LIMIT;
        let mut chunk = vec![0u8; 64 << 10];
        let insn = arch::SYSCALL_INSN;
        for map in order {
            let mut at = map.start;
            while at < map.end && budget > 0 {
                let len = chunk.len().min((map.end - at) as usize).min(budget);
                let Ok(got) = t.read_mem(at, &mut chunk[..len]) else {
                    break;
                };
                budget -= got.max(1);
                let found = chunk[..got]
                    .windows(insn.len())
                    .enumerate()
                    .map(|(i, w)| (at + i as u64, w))
                    .find(|&(addr, w)| w == insn && arch::insn_aligned(addr) && addr != avoid);
                if let Some((addr, _)) = found {
                    return Some(addr);
                }
                // Overlap by one instruction so a match across chunks is not missed.
                at += (got.max(insn.len()) - (insn.len() - 1)) as u64;
            }
        }
        None
    }
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests;
