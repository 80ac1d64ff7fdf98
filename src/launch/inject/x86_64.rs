//! x86_64 registers for the injector: saving and restoring the general registers and the whole
//! XSAVE area, and shaping a system call or a C call.
//!
//! The XSAVE area is read into a 64 KiB buffer (AMX tile data alone is 8 KiB; the kernel fills
//! what this CPU has) and written back with exactly the length the kernel returned, so no
//! component is invented or dropped.

use std::io;

use super::ptrace::Tracee;

pub(super) type Regs = libc::user_regs_struct;

/// `syscall`.
pub(super) const SYSCALL_INSN: &[u8] = &[0x0f, 0x05];
pub(super) const SYS_MMAP: u64 = libc::SYS_mmap as u64;

const NT_PRSTATUS: libc::c_int = 1;
const NT_PRFPREG: libc::c_int = 2;
const NT_X86_XSTATE: libc::c_int = 0x202;
const XSTATE_BUFFER: usize = 64 << 10;
/// The System V red zone below the stack pointer, which leaf functions use without moving it.
const RED_ZONE: u64 = 128;
const EFLAGS_TF: u64 = 0x100;
const EFLAGS_DF: u64 = 0x400;

/// Everything restored after the injection.
pub(super) struct Saved {
    pub(super) regs: Regs,
    ext_note: libc::c_int,
    ext: Vec<u8>,
}

pub(super) fn get_regs(t: &Tracee) -> io::Result<Regs> {
    t.get_struct(NT_PRSTATUS)
}

pub(super) fn set_regs(t: &Tracee, regs: &Regs) -> io::Result<()> {
    t.set_struct(NT_PRSTATUS, regs)
}

pub(super) fn save(t: &Tracee) -> io::Result<Saved> {
    let regs = get_regs(t)?;
    let mut ext = vec![0u8; XSTATE_BUFFER];
    let (ext_note, len) = match t.get_regset(NT_X86_XSTATE, &mut ext) {
        Ok(len) => (NT_X86_XSTATE, len),
        // No XSAVE on this CPU: the legacy FXSAVE area holds all of the FPU and SSE state.
        Err(_) => (NT_PRFPREG, t.get_regset(NT_PRFPREG, &mut ext)?),
    };
    ext.truncate(len);
    Ok(Saved {
        regs,
        ext_note,
        ext,
    })
}

/// Puts back the extended state, then the general registers (the last word on `orig_rax`, so
/// that an interrupted system call restarts as it would have).
pub(super) fn restore(t: &Tracee, saved: &Saved) -> io::Result<()> {
    let ext = t.set_regset(saved.ext_note, &saved.ext);
    set_regs(t, &saved.regs)?;
    ext
}

/// Nothing to do here: `orig_rax` in the registers already says "no system call".
pub(super) fn forget_syscall(_t: &Tracee) -> io::Result<()> {
    Ok(())
}

/// Any byte may start an x86 instruction.
pub(super) fn insn_aligned(_addr: u64) -> bool {
    true
}

pub(super) fn pc(regs: &Regs) -> u64 {
    regs.rip
}

/// Registers that run system call `nr` with `args` at `gadget` (a `syscall` instruction).
/// `orig_rax = -1` keeps the kernel from restarting the call the thread was interrupted in
/// over ours.
pub(super) fn syscall_regs(base: &Regs, gadget: u64, nr: u64, args: [u64; 6]) -> Regs {
    Regs {
        rip: gadget,
        rax: nr,
        orig_rax: u64::MAX,
        rdi: args[0],
        rsi: args[1],
        rdx: args[2],
        r10: args[3],
        r8: args[4],
        r9: args[5],
        eflags: base.eflags & !EFLAGS_TF,
        ..*base
    }
}

pub(super) fn syscall_result(regs: &Regs) -> u64 {
    regs.rax
}

/// Registers that call `func(a0, a1)` on the thread's own stack, below the red zone, with a
/// return address of 0; plus the stack slot to write that 0 into.
pub(super) fn call_regs(base: &Regs, func: u64, a0: u64, a1: u64) -> (Regs, Option<u64>) {
    // 16-byte aligned before the return address is pushed, as a `call` would leave it.
    let aligned = base.rsp.wrapping_sub(RED_ZONE + 256) & !15;
    let rsp = aligned - 8;
    let regs = Regs {
        rip: func,
        rdi: a0,
        rsi: a1,
        rax: 0,
        orig_rax: u64::MAX,
        rsp,
        eflags: base.eflags & !(EFLAGS_DF | EFLAGS_TF),
        ..*base
    };
    (regs, Some(rsp))
}

pub(super) fn return_value(regs: &Regs) -> u64 {
    regs.rax
}

/// Test support: overwrites every general register the injection touches and the SSE/AVX
/// registers with garbage, the way a careless call would leave them.
#[cfg(test)]
pub(super) fn scramble(t: &Tracee, saved: &Saved) -> io::Result<()> {
    let mut ext = saved.ext.clone();
    // XMM0-15 in the legacy FXSAVE region (bytes 160..416), the same in XSAVE.
    ext[160..416].fill(0x5a);
    t.set_regset(saved.ext_note, &ext)?;
    let regs = Regs {
        rax: 1,
        rbx: 2,
        rcx: 3,
        rdx: 4,
        rsi: 5,
        rdi: 6,
        r8: 7,
        r12: 8,
        r15: 9,
        orig_rax: u64::MAX,
        ..saved.regs
    };
    set_regs(t, &regs)
}

/// Test support: the saved state as bytes, to compare two saves.
#[cfg(test)]
pub(super) fn state_bytes(saved: &Saved) -> Vec<u8> {
    // SAFETY: user_regs_struct is plain integers without padding; this views exactly it.
    let regs = unsafe {
        std::slice::from_raw_parts(
            std::ptr::from_ref(&saved.regs).cast::<u8>(),
            std::mem::size_of::<Regs>(),
        )
    };
    [regs, &saved.ext].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed() -> Regs {
        // SAFETY: user_regs_struct is plain integers; all-zero is valid.
        unsafe { std::mem::zeroed() }
    }

    #[test]
    fn call_frames_are_aligned_below_the_red_zone() {
        let base = Regs {
            rsp: 0x7ffd_0000_1237,
            eflags: 0x246 | EFLAGS_DF,
            ..zeroed()
        };
        let (regs, slot) = call_regs(&base, 0x1000, 7, 8);
        assert_eq!(slot, Some(regs.rsp));
        assert_eq!((regs.rsp + 8) % 16, 0);
        assert!(regs.rsp + 8 <= base.rsp - RED_ZONE);
        assert_eq!(
            (regs.rip, regs.rdi, regs.rsi, regs.orig_rax),
            (0x1000, 7, 8, u64::MAX)
        );
        assert_eq!(regs.eflags & EFLAGS_DF, 0);
    }

    #[test]
    fn syscalls_cancel_restarts() {
        let base = Regs {
            orig_rax: 230,
            ..zeroed()
        };
        let regs = syscall_regs(&base, 0x42, SYS_MMAP, [1, 2, 3, 4, 5, 6]);
        assert_eq!((regs.rip, regs.rax, regs.orig_rax), (0x42, 9, u64::MAX));
        assert_eq!(
            [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9],
            [1, 2, 3, 4, 5, 6]
        );
    }
}
