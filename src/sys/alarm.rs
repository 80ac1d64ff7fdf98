//! A one-shot alarm on the monotonic clock (a `timerfd`), for a watchdog thread that must cost
//! nothing while all is well: arming and disarming are system calls of the watched thread, and
//! the watchdog, blocked in [`Alarm::wait`], runs only when the alarm goes off. A watchdog
//! on a condition variable with a timeout would instead wake once per watched call.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};

pub(crate) struct Alarm {
    fd: OwnedFd,
}

fn timespec(duration: Duration) -> Timespec {
    Timespec {
        tv_sec: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(duration.subsec_nanos()),
    }
}

impl Alarm {
    pub(crate) fn new() -> io::Result<Self> {
        let fd = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::CLOEXEC)?;
        Ok(Alarm { fd })
    }

    /// Sets the alarm to go off `after` from now, replacing any earlier setting. A zero
    /// duration would disarm the timer, so it goes off after a nanosecond instead.
    pub(crate) fn arm(&self, after: Duration) -> io::Result<()> {
        self.set(after.max(Duration::from_nanos(1)))
    }

    /// Cancels the alarm; a [`Alarm::wait`] in progress goes on waiting.
    pub(crate) fn disarm(&self) -> io::Result<()> {
        self.set(Duration::ZERO)
    }

    fn set(&self, after: Duration) -> io::Result<()> {
        let spec = Itimerspec {
            it_interval: timespec(Duration::ZERO),
            it_value: timespec(after),
        };
        timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec)?;
        Ok(())
    }

    /// Blocks until the alarm goes off.
    pub(crate) fn wait(&self) -> io::Result<()> {
        let mut expirations = [0u8; 8];
        loop {
            match rustix::io::read(&self.fd, &mut expirations) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_ci::PATIENCE;
    use std::sync::mpsc;
    use std::sync::Arc;

    #[test]
    fn an_armed_alarm_goes_off_and_a_disarmed_one_does_not() {
        let alarm = Arc::new(Alarm::new().expect("a timerfd"));
        let (done_tx, done) = mpsc::channel();
        let waiter = alarm.clone();
        std::thread::spawn(move || {
            waiter.wait().expect("the wait");
            let _ = done_tx.send(());
        });
        alarm.arm(Duration::from_millis(10)).unwrap();
        alarm.disarm().unwrap();
        assert!(
            done.recv_timeout(Duration::from_millis(100)).is_err(),
            "a disarmed alarm woke its waiter"
        );
        alarm.arm(Duration::ZERO).unwrap();
        done.recv_timeout(PATIENCE)
            .expect("an armed alarm wakes its waiter");
    }
}
