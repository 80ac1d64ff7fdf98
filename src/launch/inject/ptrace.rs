//! The ptrace calls the injector makes, on one traced thread: seize, interrupt, resume,
//! register sets, memory, and waiting for a stop with a deadline.
//!
//! ptrace ties a tracee to the tracing *thread*, so a [`Tracee`] must be used from the thread
//! that seized it (it is neither Send nor Sync). Raw `libc::ptrace` is used rather than nix's
//! wrappers because waits and resumes must handle any signal number, real-time ones included.

use std::io;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

/// How a traced thread stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// PTRACE_EVENT_STOP after PTRACE_INTERRUPT (or another ptrace event).
    Event,
    /// A group-stop (SIGSTOP and friends) reported as PTRACE_EVENT_STOP.
    Group,
    /// Signal-delivery-stop: the thread is about to receive this signal.
    Signal(i32),
    /// The process is gone (exited or killed); the text says how.
    Gone(&'static str, i32),
}

/// Plain old data: every bit pattern is a valid value (libc's register structs, integers).
///
/// # Safety
/// Implement only for types made of integers, with no padding that matters and no pointers
/// or references.
pub(super) unsafe trait PlainData: Copy {}

// SAFETY: an integer.
unsafe impl PlainData for i32 {}
// SAFETY: user_regs_struct is a C struct of integers on every Linux architecture.
unsafe impl PlainData for libc::user_regs_struct {}

/// A thread seized with PTRACE_SEIZE; only the seizing thread may use it.
pub(super) struct Tracee {
    pid: libc::pid_t,
    /// ptrace is per tracer thread: keep this type on the thread that created it.
    _not_send: PhantomData<*const ()>,
}

fn ptrace_raw(
    request: libc::c_uint,
    pid: libc::pid_t,
    addr: usize,
    data: usize,
) -> io::Result<libc::c_long> {
    // SAFETY: every request made here passes either plain integers or, for register sets, a
    // pointer to an iovec that the caller keeps alive and sized for the call.
    let rc = unsafe {
        libc::ptrace(
            request,
            pid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl Tracee {
    /// PTRACE_SEIZE without options: the thread keeps running until interrupted.
    pub(super) fn seize(pid: u32) -> io::Result<Tracee> {
        let pid =
            libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        ptrace_raw(libc::PTRACE_SEIZE, pid, 0, 0)?;
        Ok(Tracee {
            pid,
            _not_send: PhantomData,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    pub(super) fn interrupt(&self) -> io::Result<()> {
        ptrace_raw(libc::PTRACE_INTERRUPT, self.pid, 0, 0).map(drop)
    }

    pub(super) fn cont(&self) -> io::Result<()> {
        ptrace_raw(libc::PTRACE_CONT, self.pid, 0, 0).map(drop)
    }

    pub(super) fn step(&self) -> io::Result<()> {
        ptrace_raw(libc::PTRACE_SINGLESTEP, self.pid, 0, 0).map(drop)
    }

    /// Detaches from a stopped thread, which then runs on.
    pub(super) fn detach(&self) -> io::Result<()> {
        ptrace_raw(libc::PTRACE_DETACH, self.pid, 0, 0).map(drop)
    }

    /// Polls waitpid(__WALL|WNOHANG) until the thread stops or `deadline` passes (`None`).
    pub(super) fn wait_stop(&self, deadline: Instant) -> io::Result<Option<Stop>> {
        loop {
            let mut status = 0;
            // SAFETY: status is a valid, writable int.
            let rc =
                unsafe { libc::waitpid(self.pid, &raw mut status, libc::__WALL | libc::WNOHANG) };
            if rc == -1 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(err);
            }
            if rc == self.pid {
                return Ok(Some(decode(status)));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// PTRACE_GETREGSET into `buf`; returns how many bytes the kernel filled.
    pub(super) fn get_regset(&self, note: libc::c_int, buf: &mut [u8]) -> io::Result<usize> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let note = usize::try_from(note).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        ptrace_raw(
            libc::PTRACE_GETREGSET,
            self.pid,
            note,
            std::ptr::addr_of_mut!(iov) as usize,
        )?;
        Ok(iov.iov_len.min(buf.len()))
    }

    /// PTRACE_SETREGSET from `data`.
    pub(super) fn set_regset(&self, note: libc::c_int, data: &[u8]) -> io::Result<()> {
        // The kernel only reads through this pointer for SETREGSET.
        let mut iov = libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast(),
            iov_len: data.len(),
        };
        let note = usize::try_from(note).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        ptrace_raw(
            libc::PTRACE_SETREGSET,
            self.pid,
            note,
            std::ptr::addr_of_mut!(iov) as usize,
        )
        .map(drop)
    }

    /// Reads a plain-old-data register struct.
    pub(super) fn get_struct<T: PlainData>(&self, note: libc::c_int) -> io::Result<T> {
        // SAFETY: T is PlainData, so all-zero bytes are a valid T.
        let mut value: T = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<T>();
        // SAFETY: value is a live T; the byte view covers exactly its size, and T is
        // PlainData, so any bytes the kernel writes form a valid T.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(std::ptr::addr_of_mut!(value).cast::<u8>(), size)
        };
        let filled = self.get_regset(note, bytes)?;
        if filled != size {
            return Err(io::Error::other(format!(
                "the kernel returned {filled} bytes of register set {note:#x}, not {size}"
            )));
        }
        Ok(value)
    }

    /// Writes a plain-old-data register struct.
    pub(super) fn set_struct<T: PlainData>(&self, note: libc::c_int, value: &T) -> io::Result<()> {
        // SAFETY: the byte view covers exactly one live, initialised T.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                std::ptr::from_ref(value).cast::<u8>(),
                std::mem::size_of::<T>(),
            )
        };
        self.set_regset(note, bytes)
    }

    pub(super) fn read_mem(&self, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
        let remote = [RemoteIoVec {
            base: usize::try_from(addr).map_err(io::Error::other)?,
            len: buf.len(),
        }];
        process_vm_readv(
            Pid::from_raw(self.pid),
            &mut [io::IoSliceMut::new(buf)],
            &remote,
        )
        .map_err(io::Error::from)
    }

    pub(super) fn write_mem(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        let remote = [RemoteIoVec {
            base: usize::try_from(addr).map_err(io::Error::other)?,
            len: data.len(),
        }];
        let written =
            process_vm_writev(Pid::from_raw(self.pid), &[io::IoSlice::new(data)], &remote)?;
        if written != data.len() {
            return Err(io::Error::other(format!(
                "wrote {written} of {} bytes into process {}",
                data.len(),
                self.pid
            )));
        }
        Ok(())
    }
}

fn decode(status: i32) -> Stop {
    if libc::WIFEXITED(status) {
        return Stop::Gone("exited with status", libc::WEXITSTATUS(status));
    }
    if libc::WIFSIGNALED(status) {
        return Stop::Gone("was killed by signal", libc::WTERMSIG(status));
    }
    let signal = libc::WSTOPSIG(status);
    match status >> 16 {
        0 => Stop::Signal(signal),
        libc::PTRACE_EVENT_STOP
            if matches!(
                signal,
                libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
            ) =>
        {
            Stop::Group
        }
        _ => Stop::Event,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses() {
        assert_eq!(decode(0x0500), Stop::Gone("exited with status", 5));
        assert_eq!(decode(9), Stop::Gone("was killed by signal", 9));
        assert_eq!(decode(0x0b7f), Stop::Signal(libc::SIGSEGV));
        assert_eq!(
            decode(0x057f | (libc::PTRACE_EVENT_STOP << 16)),
            Stop::Event
        );
        assert_eq!(
            decode(0x137f | (libc::PTRACE_EVENT_STOP << 16)),
            Stop::Group
        );
        assert_eq!(
            decode(0x227f),
            Stop::Signal(34),
            "real-time signals decode too"
        );
    }
}
