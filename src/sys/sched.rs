//! Scheduling class of torchtop's background threads.
//!
//! The sampler, the GPU workers and the driver thread run as `SCHED_BATCH`: same CPU share as
//! any other thread, but a wake-up of one of them does not preempt the thread that woke it.
//! Without it, each tick cost extra context switches: the GPU worker woke the sampler while
//! still inside the channel's send (holding its lock), the sampler preempted it at once, then
//! blocked on that lock until the worker ran again. The UI thread stays a normal thread, so
//! that a key press still preempts whatever runs.

use std::io;

/// Puts the calling thread in the `SCHED_BATCH` class (any user may; no priority changes).
pub(crate) fn run_this_thread_as_batch() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 names the calling thread; `param` is a valid, initialized sched_param
    // that outlives the call, which only reads it.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &raw const param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
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
}
