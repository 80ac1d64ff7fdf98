//! Scheduling of torchtop's threads: the background threads' class, and the hand-over of the
//! UI thread's wake-up to the core the sampler already runs on.
//!
//! The sampler, the GPU workers and the driver thread run as `SCHED_BATCH`: same CPU share as
//! any other thread, but a wake-up of one of them does not preempt the thread that woke it.
//! Without it, each tick cost extra context switches: the GPU worker woke the sampler while
//! still inside the channel's send (holding its lock), the sampler preempted it at once, then
//! blocked on that lock until the worker ran again. The UI thread stays a normal thread, so
//! that a key press still preempts whatever runs.
//!
//! Each tick the sampler thread wakes on its clock and then wakes the UI thread with the new
//! snapshot. Left alone, the kernel wakes the UI thread on the core it last ran on whenever that
//! core is idle: a second sleeping core woken a tick. On a virtual machine that wake-up is dear
//! (on this project's build machine an empty loop pays 80 to 125 µs of CPU a wake-up after a
//! second asleep, against 1 to 2 µs for a switch between two threads on a core already awake).
//! So the UI thread follows the sampler's core ([`Handover`]): the sampler narrows it to the
//! core it runs on before the wake when it is not there already, and the input thread frees it
//! before handing it a key, so that a key is answered on any core, never held to one that may be
//! busy. Narrowing costs a system call only when the sampler's core changes or after a key.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustix::process::Pid;
use rustix::thread::{self, CpuSet};

/// Puts the calling thread in the `SCHED_BATCH` class (any user may; no priority changes).
pub(crate) fn run_this_thread_as_batch() -> io::Result<()> {
    set_policy(0, libc::SCHED_BATCH)
}

/// Puts thread `tid` (0: the calling thread) of this process in `policy`, `SCHED_BATCH` or
/// `SCHED_OTHER`: classes any user may move its own threads between, at priority 0.
fn set_policy(tid: libc::pid_t, policy: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `tid` names a thread of this process or the calling one; `param` is a valid,
    // initialized sched_param that outlives the call, which only reads it.
    let rc = unsafe { libc::sched_setscheduler(tid, policy, &raw const param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A thread that wakes on its waker's core, without preempting it: narrowed to that core, and
/// `SCHED_BATCH`, until freed.
pub(crate) struct Handover {
    tid: Pid,
    /// The cores the thread may run on, given back when it is freed.
    allowed: CpuSet,
    /// The core it is narrowed to, or [`FREE`].
    narrowed_to: AtomicUsize,
}

/// [`Handover::narrowed_to`] when the thread may run on all its cores.
const FREE: usize = usize::MAX;

impl Handover {
    /// The calling thread; `None` when it may run on one core only (nothing to hand over) or its
    /// cores cannot be read.
    pub(crate) fn of_this_thread() -> Option<Handover> {
        let allowed = thread::sched_getaffinity(None).ok()?;
        (allowed.count() > 1).then(|| Handover {
            tid: thread::gettid(),
            allowed,
            narrowed_to: AtomicUsize::new(FREE),
        })
    }

    /// Called by the waker just before it wakes the thread: the thread may then run only on the
    /// waker's core. Best effort: a core the thread may not use, or a refusal, changes nothing.
    pub(crate) fn before_wake(&self) {
        let here = thread::sched_getcpu();
        let was = self.narrowed_to.load(Ordering::Acquire);
        if was == here || !self.allowed.is_set(here) {
            return;
        }
        let mut core = CpuSet::new();
        core.set(here);
        if thread::sched_setaffinity(Some(self.tid), &core).is_ok() {
            if was == FREE {
                // Best effort: left normal, the thread only preempts its waker once a tick.
                let _ = set_policy(self.tid.as_raw_nonzero().get(), libc::SCHED_BATCH);
            }
            self.narrowed_to.store(here, Ordering::Release);
        }
    }

    /// All its cores again, as a normal thread; called before the thread is woken for something
    /// that must not wait on one core or for a busy core's time slice to end (a key). A narrowing
    /// racing with this may leave the thread on the waker's core, or `SCHED_BATCH`, until the
    /// next key: the key is still handled, at worst after the slice of whatever runs there.
    pub(crate) fn free(&self) {
        if self.narrowed_to.swap(FREE, Ordering::AcqRel) != FREE {
            // Best effort as well: refused, the thread stays on one core (or batch) until the
            // next try.
            let _ = set_policy(self.tid.as_raw_nonzero().get(), libc::SCHED_OTHER);
            let _ = thread::sched_setaffinity(Some(self.tid), &self.allowed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_becomes_batch_and_others_are_untouched() {
        let policy = std::thread::spawn(|| {
            run_this_thread_as_batch().expect("SCHED_BATCH needs no privilege");
            // SAFETY: pid 0 names the calling thread; the call takes no pointers.
            unsafe { libc::sched_getscheduler(0) }
        })
        .join()
        .unwrap();
        assert_eq!(policy, libc::SCHED_BATCH);
        // SAFETY: as above.
        let here = unsafe { libc::sched_getscheduler(0) };
        assert_eq!(here, libc::SCHED_OTHER, "only the calling thread changes");
    }

    /// The cores `tid` may run on, as a list.
    fn cores_of(tid: Pid) -> Vec<usize> {
        let set = thread::sched_getaffinity(Some(tid)).expect("a thread's own cores");
        (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
    }

    /// The scheduling class of `tid`.
    fn policy_of(tid: Pid) -> libc::c_int {
        // SAFETY: the call takes no pointers; `tid` is a live thread of this process.
        unsafe { libc::sched_getscheduler(tid.as_raw_nonzero().get()) }
    }

    #[test]
    fn a_woken_thread_runs_on_the_wakers_core_until_freed() {
        let Some(handover) = Handover::of_this_thread() else {
            say!("skipped: this test thread may run on one core only");
            return;
        };
        let all = cores_of(handover.tid);
        let wake_from_another_thread = || {
            std::thread::scope(|scope| scope.spawn(|| handover.before_wake()).join())
                .expect("the waker thread");
        };
        wake_from_another_thread();
        let narrowed = cores_of(handover.tid);
        assert_eq!(narrowed.len(), 1, "narrowed to one core: {narrowed:?}");
        assert!(all.contains(&narrowed[0]), "one of its own: {narrowed:?}");
        assert_eq!(thread::sched_getcpu(), narrowed[0], "and woken there");
        assert_eq!(
            policy_of(handover.tid),
            libc::SCHED_BATCH,
            "woken without preempting its waker"
        );
        wake_from_another_thread();
        assert_eq!(cores_of(handover.tid).len(), 1, "still one core");
        std::thread::scope(|scope| scope.spawn(|| handover.free()).join()).expect("the freer");
        assert_eq!(cores_of(handover.tid), all, "all its cores again");
        assert_eq!(
            policy_of(handover.tid),
            libc::SCHED_OTHER,
            "a normal thread again, that a key may preempt with"
        );
        handover.free();
        assert_eq!(cores_of(handover.tid), all, "freeing twice changes nothing");
        wake_from_another_thread();
        assert_eq!(
            cores_of(handover.tid).len(),
            1,
            "narrowed again after a free"
        );
        handover.free();
    }
}
