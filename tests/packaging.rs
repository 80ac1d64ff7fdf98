//! What packagers ship besides the binary: `--version`, the shell completions (checked by each
//! shell's own parser) and the man pages (rendered by groff).
//!
//! A shell or groff that is not installed is skipped with a note, except under `CI`, where
//! .ci/run installs them and a missing one fails.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn torchtop(args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_torchtop"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run torchtop");
    assert!(
        output.status.success(),
        "torchtop {args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Feeds `input` to `tool args` and returns its output; `None` when the tool is not installed.
fn pipe_into(tool: &str, args: &[&str], input: &[u8]) -> Option<Output> {
    let child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{tool} is not installed (CI installs it)"
            );
            eprintln!("SKIPPED: {tool} is not installed");
            return None;
        }
        Err(error) => panic!("cannot run {tool}: {error}"),
    };
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(input).expect("write to the checker");
    drop(stdin);
    Some(child.wait_with_output().expect("wait for the checker"))
}

#[test]
fn version_names_version_commit_and_features() {
    let out = String::from_utf8(torchtop(&["--version"]).stdout).unwrap();
    let line = out.trim_end();
    let prefix = format!("torchtop {} (commit ", env!("CARGO_PKG_VERSION"));
    let rest = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{line:?}"));
    let (commit, features) = rest
        .split_once(", features: ")
        .unwrap_or_else(|| panic!("{line:?}"));
    assert!(
        commit == "unknown" || (commit.len() == 7 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{line:?}"
    );
    assert!(features.ends_with(')'), "{line:?}");
}

#[test]
fn completion_scripts_parse_in_their_shells() {
    for (shell, check) in [
        ("bash", &["-n"][..]),
        ("zsh", &["-n"][..]),
        ("fish", &["--no-execute"][..]),
    ] {
        let script = torchtop(&["completions", shell]).stdout;
        assert!(!script.is_empty(), "{shell}: empty script");
        let Some(checked) = pipe_into(shell, check, &script) else {
            continue;
        };
        assert!(
            checked.status.success(),
            "{shell} rejects the script: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
    }
}

#[test]
fn a_broken_script_fails_the_shell_check() {
    // The check above must be able to fail: bash -n rejects a script cut in the middle.
    let script = torchtop(&["completions", "bash"]).stdout;
    let cut = &script[..script.len() / 2];
    if let Some(checked) = pipe_into("bash", &["-n"], cut) {
        assert!(!checked.status.success(), "bash -n accepted half a script");
    }
}

#[test]
fn man_pages_render_without_warnings() {
    for page in [&["man"][..], &["man", "serve"][..], &["man", "run"][..]] {
        let roff = torchtop(page).stdout;
        let Some(rendered) = pipe_into("groff", &["-man", "-Tutf8", "-ww", "-P-cbou"], &roff)
        else {
            return;
        };
        let warnings = String::from_utf8_lossy(&rendered.stderr);
        assert!(
            rendered.status.success() && warnings.trim().is_empty(),
            "{page:?}: {warnings}"
        );
        let text = String::from_utf8_lossy(&rendered.stdout);
        assert!(text.contains("OPTIONS"), "{page:?}: {text}");
    }
}

#[test]
fn an_unknown_man_page_is_a_sentence() {
    let output = Command::new(env!("CARGO_BIN_EXE_torchtop"))
        .args(["man", "nope"])
        .output()
        .expect("run torchtop");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("there is no subcommand 'nope'; the pages are: serve"),
        "{stderr}"
    );
}

#[test]
fn a_reader_that_closed_the_pipe_is_not_an_error() {
    // The read end is closed before torchtop writes, so every write fails with EPIPE.
    let (reader, writer) = nix::unistd::pipe().expect("a pipe");
    drop(reader);
    let writer = std::fs::File::from(writer);
    for args in [&["completions", "zsh"][..], &["man"][..]] {
        let output = Command::new(env!("CARGO_BIN_EXE_torchtop"))
            .args(args)
            .stdout(writer.try_clone().expect("clone the pipe"))
            .stderr(Stdio::piped())
            .output()
            .expect("run torchtop");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            output.status.success(),
            "{args:?}: {}: {stderr}",
            output.status
        );
    }
}
