//! aarch64 registers for the injector: saving and restoring the general registers, the FPSIMD
//! registers, the SVE state when the CPU has it, and the system-call number; and shaping a
//! system call or a C call.
//!
//! Type-checked with `cargo check --target aarch64-unknown-linux-gnu`; not run on arm64 yet.
//! SME's ZA/streaming state is not saved: the injected call (Py_AddPendingCall) does not use it.

use std::io;

use super::ptrace::Tracee;

pub(super) type Regs = libc::user_regs_struct;

/// `svc #0`, little-endian.
pub(super) const SYSCALL_INSN: &[u8] = &[0x01, 0x00, 0x00, 0xd4];
pub(super) const SYS_MMAP: u64 = libc::SYS_mmap as u64;

const NT_PRSTATUS: libc::c_int = 1;
const NT_PRFPREG: libc::c_int = 2;
const NT_ARM_SYSTEM_CALL: libc::c_int = 0x404;
const NT_ARM_SVE: libc::c_int = 0x405;
/// Room for the largest SVE vector length (2048 bits) with all Z, P and FFR registers.
const SVE_BUFFER: usize = 64 << 10;
/// PSTATE.BTYPE: a stale branch type would fault on a BTI landing pad we jump to directly.
const PSTATE_BTYPE: u64 = 0b11 << 10;

/// Everything restored after the injection.
pub(super) struct Saved {
    pub(super) regs: Regs,
    fpsimd: Vec<u8>,
    sve: Option<Vec<u8>>,
    syscall_no: Option<i32>,
}

pub(super) fn get_regs(t: &Tracee) -> io::Result<Regs> {
    t.get_struct(NT_PRSTATUS)
}

pub(super) fn set_regs(t: &Tracee, regs: &Regs) -> io::Result<()> {
    t.set_struct(NT_PRSTATUS, regs)
}

pub(super) fn save(t: &Tracee) -> io::Result<Saved> {
    let regs = get_regs(t)?;
    let mut fpsimd = vec![0u8; 1024];
    let len = t.get_regset(NT_PRFPREG, &mut fpsimd)?;
    fpsimd.truncate(len);
    let mut sve = vec![0u8; SVE_BUFFER];
    // ENODEV/EINVAL: no SVE on this CPU or kernel; FPSIMD then holds all vector state.
    let sve = t.get_regset(NT_ARM_SVE, &mut sve).ok().map(|len| {
        sve.truncate(len);
        sve
    });
    Ok(Saved {
        regs,
        fpsimd,
        sve,
        syscall_no: t.get_struct::<i32>(NT_ARM_SYSTEM_CALL).ok(),
    })
}

/// Puts back the vector state (SVE last: it includes the FPSIMD view), the general registers,
/// and the system-call number the kernel uses to decide on a restart.
pub(super) fn restore(t: &Tracee, saved: &Saved) -> io::Result<()> {
    let fp = t.set_regset(NT_PRFPREG, &saved.fpsimd);
    let sve = saved
        .sve
        .as_ref()
        .map_or(Ok(()), |sve| t.set_regset(NT_ARM_SVE, sve));
    set_regs(t, &saved.regs)?;
    if let Some(no) = saved.syscall_no {
        t.set_struct(NT_ARM_SYSTEM_CALL, &no)?;
    }
    fp.and(sve)
}

/// Tells the kernel the thread is in no system call, so it restarts nothing over ours.
pub(super) fn forget_syscall(t: &Tracee) -> io::Result<()> {
    t.set_struct(NT_ARM_SYSTEM_CALL, &-1i32)
}

/// A64 instructions are 4-byte aligned.
pub(super) fn insn_aligned(addr: u64) -> bool {
    addr % 4 == 0
}

pub(super) fn pc(regs: &Regs) -> u64 {
    regs.pc
}

/// Registers that run system call `nr` with `args` at `gadget` (an `svc #0` instruction).
pub(super) fn syscall_regs(base: &Regs, gadget: u64, nr: u64, args: [u64; 6]) -> Regs {
    let mut regs = *base;
    regs.pc = gadget;
    regs.regs[8] = nr;
    regs.regs[..6].copy_from_slice(&args);
    regs.pstate &= !PSTATE_BTYPE;
    regs
}

pub(super) fn syscall_result(regs: &Regs) -> u64 {
    regs.regs[0]
}

/// Registers that call `func(a0, a1)` on the thread's own stack with a link register of 0.
pub(super) fn call_regs(base: &Regs, func: u64, a0: u64, a1: u64) -> (Regs, Option<u64>) {
    let mut regs = *base;
    regs.pc = func;
    regs.regs[0] = a0;
    regs.regs[1] = a1;
    regs.regs[30] = 0;
    regs.sp = base.sp.wrapping_sub(256) & !15;
    regs.pstate &= !PSTATE_BTYPE;
    (regs, None)
}

pub(super) fn return_value(regs: &Regs) -> u64 {
    regs.regs[0]
}
