//! Whether this kernel lets torchtop ptrace a process (Yama's `kernel.yama.ptrace_scope`), and
//! the sentences that say what to do when it does not.
//!
//! The facts come in as a [`PtraceRights`] value so the rules can be tested for every scope
//! without changing the machine's settings.

use super::target;

/// What attach can do instead, named in every refusal.
pub(crate) const ALTERNATIVES: &str = "Instead, start the program under `torchtop run -- python train.py ...`, or add `import torchtop_agent; torchtop_agent.start()` to it.";

/// The facts that decide whether ptrace may work on one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PtraceRights {
    /// kernel.yama.ptrace_scope; `None` without Yama.
    pub(crate) scope: Option<u32>,
    pub(crate) cap_sys_ptrace: bool,
    /// The target descends from torchtop (scope 1 allows that).
    pub(crate) descendant: bool,
}

impl PtraceRights {
    /// The facts on this machine for process `pid`.
    pub(crate) fn of(pid: u32) -> PtraceRights {
        PtraceRights {
            scope: target::yama_ptrace_scope(),
            cap_sys_ptrace: target::we_have_cap_sys_ptrace(),
            descendant: target::is_descendant_of_us(pid),
        }
    }
}

fn scope_text(scope: Option<u32>) -> String {
    scope.map_or("this kernel has no Yama ptrace_scope".to_string(), |s| {
        format!("kernel.yama.ptrace_scope = {s}")
    })
}

/// Refuses up front when Yama forbids ptrace on `pid`; says what to do instead.
pub(crate) fn check(rights: PtraceRights, pid: u32) -> Result<(), String> {
    match rights.scope {
        Some(3) => Err(format!(
            "kernel.yama.ptrace_scope = 3 forbids ptrace for every user, root included, until the next reboot, so torchtop attach cannot reach process {pid}."
        )),
        Some(2) if !rights.cap_sys_ptrace => Err(format!(
            "kernel.yama.ptrace_scope = 2 allows ptrace only with CAP_SYS_PTRACE, which torchtop does not have: run `sudo torchtop attach {pid}`."
        )),
        Some(1) if !rights.cap_sys_ptrace && !rights.descendant => Err(format!(
            "kernel.yama.ptrace_scope = 1 lets a process ptrace only its own descendants, and process {pid} is not one of torchtop's: run `sudo torchtop attach {pid}` (or lower the scope with `sysctl kernel.yama.ptrace_scope=0`)."
        )),
        _ => Ok(()),
    }
}

/// The sentence for a ptrace that the kernel refused although Yama allowed it.
pub(crate) fn denied(rights: PtraceRights, pid: u32, why: &str) -> String {
    format!(
        "ptrace is not permitted on process {pid} ({why}); {}. A container may also need CAP_SYS_PTRACE, and a process that changed its uid (setuid) can be traced only by root.",
        scope_text(rights.scope)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rights(scope: Option<u32>, cap: bool, descendant: bool) -> PtraceRights {
        PtraceRights {
            scope,
            cap_sys_ptrace: cap,
            descendant,
        }
    }

    #[test]
    fn scope_3_refuses_even_root() {
        let err = check(rights(Some(3), true, true), 7).unwrap_err();
        assert!(
            err.contains("ptrace_scope = 3") && err.contains("root included"),
            "{err}"
        );
    }

    #[test]
    fn scope_2_needs_the_capability() {
        let err = check(rights(Some(2), false, true), 7).unwrap_err();
        assert!(
            err.contains("CAP_SYS_PTRACE") && err.contains("sudo torchtop attach 7"),
            "{err}"
        );
        assert!(check(rights(Some(2), true, false), 7).is_ok());
    }

    #[test]
    fn scope_1_allows_descendants_and_root() {
        let err = check(rights(Some(1), false, false), 7).unwrap_err();
        assert!(
            err.contains("own descendants") && err.contains("sudo torchtop attach 7"),
            "{err}"
        );
        assert!(check(rights(Some(1), false, true), 7).is_ok());
        assert!(check(rights(Some(1), true, false), 7).is_ok());
    }

    #[test]
    fn scope_0_and_no_yama_allow() {
        assert!(check(rights(Some(0), false, false), 7).is_ok());
        assert!(check(rights(None, false, false), 7).is_ok());
        let text = denied(rights(None, false, false), 7, "EPERM");
        assert!(
            text.contains("no Yama") && text.contains("CAP_SYS_PTRACE"),
            "{text}"
        );
    }

    #[test]
    fn alternatives_name_both_ways() {
        assert!(ALTERNATIVES.contains("torchtop run --"));
        assert!(ALTERNATIVES.contains("import torchtop_agent; torchtop_agent.start()"));
    }
}
