//! `torchtop run` as a user meets it, through the real binary: a monitoring problem never stops
//! the program (it runs without the agent, keeps its own exit status, and stderr says why), and
//! a Python that will not read sitecustomize is named on stderr.

use crate::common::skip_or_fail;
use crate::launch_support;

use std::process::{Command, Output};

use launch_support::interpreters;

fn torchtop_run(agent_dir: &std::path::Path, command: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_torchtop"))
        .args(["run", "--"])
        .args(command)
        .env("TORCHTOP_AGENT_DIR", agent_dir)
        .output()
        .unwrap()
}

#[test]
fn an_unusable_socket_directory_does_not_stop_the_program() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let open = temp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    // Writable by every user: another user could swap the site directory.
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    for unusable in [file.join("sockets"), open.clone(), open.join("below")] {
        let out = torchtop_run(&unusable, &["sh", "-c", "echo the program ran; exit 7"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(7),
            "{}: {stderr}",
            unusable.display()
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "the program ran\n");
        assert!(
            stderr.contains("sh runs without the torchtop agent"),
            "{}: {stderr}",
            unusable.display()
        );
    }
}

#[test]
fn a_python_that_skips_sitecustomize_is_named() {
    let Some(python) = interpreters().into_iter().next() else {
        skip_or_fail("no python3 is installed");
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let agents = temp.path().join("agents");
    let python = python.to_str().unwrap();
    for (flag, why) in [
        ("-I", "isolated mode (-I)"),
        ("-E", "ignores PYTHONPATH (-E)"),
        ("-S", "skips the site module (-S)"),
    ] {
        let out = torchtop_run(&agents, &[python, flag, "-c", "import sys; print('ran')"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
        assert!(stderr.contains(why), "{flag}: {stderr}");
        assert!(
            stderr.contains("gets no torchtop agent"),
            "{flag}: {stderr}"
        );
    }
    let out = torchtop_run(&agents, &[python, "-c", "print('ran')"]);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("no torchtop agent"),
        "a plain python gets the agent and no warning"
    );
}
