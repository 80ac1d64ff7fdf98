//! The Python code that `torchtop attach` makes the target run, whichever way it gets there
//! (the ptrace injector, gdb, or `sys.remote_exec`).
//!
//! It builds the `torchtop_agent` module from the source embedded in torchtop, so the target
//! imports no file that torchtop wrote; starts it; and writes the outcome as one JSON line into
//! the result file that torchtop created for it. It catches every exception: a pending call
//! that fails would otherwise raise SystemError in the target's main thread. A Ctrl-C that
//! lands in it is handed back to the main thread. Past `deadline` (torchtop gave up waiting) it
//! starts nothing, so a late run cannot surprise anyone.

use std::path::Path;

use serde_json::Value;

use super::AGENT_SOURCE;

/// A JSON string literal is also a valid Python string literal.
fn py_str(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

fn py_path(path: Option<&Path>) -> String {
    path.map_or("None".to_string(), |p| py_str(&p.to_string_lossy()))
}

/// The start code. `socket_dir`: where the agent serves (`None`: the target's own rules);
/// `result`: the file to report into; `deadline`: Unix time after which it does nothing.
pub(crate) fn start_code(socket_dir: Option<&Path>, result: &Path, deadline: f64) -> String {
    format!(
        r#"def _torchtop_attach(source, socket_dir, result_path, deadline):
    import sys
    try:
        import os, time
        if time.time() > deadline:
            sys.stderr.write("torchtop attach: this process reached the start code after torchtop had stopped waiting; the agent was not started. Run torchtop attach again.\n")
            return
        outcome = {{"path": None, "error": None}}
        try:
            module = sys.modules.get("torchtop_agent")
            if module is None:
                import types
                module = types.ModuleType("torchtop_agent")
                sys.modules["torchtop_agent"] = module
                try:
                    exec(compile(source, "<torchtop_agent>", "exec"), module.__dict__)
                except BaseException:
                    del sys.modules["torchtop_agent"]
                    raise
            outcome["path"] = module.start(socket_dir=socket_dir)
            if outcome["path"] is None:
                outcome["error"] = getattr(module, "last_error", None) or "the agent refused to start"
        except Exception as e:
            outcome["error"] = "%s: %s" % (type(e).__name__, e)
        import json
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(result_path, flags)
        try:
            os.write(fd, (json.dumps(outcome) + "\n").encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except KeyboardInterrupt:
        import _thread
        _thread.interrupt_main()
    except BaseException as e:
        try:
            sys.stderr.write("torchtop attach: the start code failed: %r\n" % (e,))
        except BaseException:
            pass


try:
    _torchtop_attach({source}, {socket_dir}, {result}, {deadline})
finally:
    del _torchtop_attach
"#,
        source = py_str(AGENT_SOURCE),
        socket_dir = py_path(socket_dir),
        result = py_path(Some(result)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    fn python_runs(code: &str, stdin_code: bool) -> Option<std::process::Output> {
        let mut child = Command::new("python3")
            .args([
                "-c",
                if stdin_code {
                    "import sys; exec(sys.stdin.read())"
                } else {
                    code
                },
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        child.stdin.take()?.write_all(code.as_bytes()).ok()?;
        child.wait_with_output().ok()
    }

    #[test]
    fn quoted_paths_and_no_nul() {
        let code = start_code(Some(Path::new("/d\"ir")), Path::new("/r'.json"), 12.5);
        assert!(code.contains(r#", "/d\"ir", "/r'.json", 12.5)"#), "{code}");
        assert!(!code.contains('\0'));
        let other = start_code(None, Path::new("/r"), 1.0);
        assert!(other.contains(r#", None, "/r", 1)"#));
    }

    #[test]
    fn runs_starts_the_agent_and_reports() {
        let temp = tempfile::tempdir().unwrap();
        let result = temp.path().join("result");
        std::fs::write(&result, "").unwrap();
        let sockets = temp.path().join("agents");
        let code = start_code(Some(&sockets), &result, 4e9);
        let program = format!(
            "{code}\nimport sys\nprint('leftover' if '_torchtop_attach' in globals() else 'clean', sys.modules['torchtop_agent'].socket_path())\n"
        );
        let Some(out) = python_runs(&program, true) else {
            crate::test_ci::skip_or_fail("python3 is not installed");
            return;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.starts_with("clean "), "{stdout}");
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
        assert!(report["path"]
            .as_str()
            .unwrap()
            .starts_with(&*sockets.to_string_lossy()));
        assert!(report["error"].is_null());
    }

    #[test]
    fn past_the_deadline_it_does_nothing_and_never_raises() {
        let temp = tempfile::tempdir().unwrap();
        let sockets = temp.path().join("agents");
        let late = start_code(Some(&sockets), &temp.path().join("result"), 1.0);
        let unwritable = start_code(Some(&sockets), Path::new("/nonexistent/result"), 4e9);
        for (code, wanted) in [
            (late, "stopped waiting"),
            (unwritable, "the start code failed"),
        ] {
            let program = format!("{code}\nimport sys\nprint('torchtop_agent' in sys.modules)\n");
            let Some(out) = python_runs(&program, true) else {
                crate::test_ci::skip_or_fail("python3 is not installed");
                return;
            };
            assert!(out.status.success());
            assert!(String::from_utf8_lossy(&out.stderr).contains(wanted));
        }
    }
}
