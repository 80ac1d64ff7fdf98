//! The three root compromises of issue 11, attacked for real: a hostile user (`nobody`) prepares
//! the trap, and torchtop runs as root. Each test failed on the code before the fix:
//! 1. `attach` chowned a root-owned directory named by the target's TORCHTOP_AGENT_DIR;
//! 2. `attach` ran the target's executable (any ELF named `python3`) as root;
//! 3. `run` imported code planted in a squatted socket directory, and `attach` wrote its files
//!    into the target's directory.
//!
//! They need root (to be root, and to make a second user's processes); elsewhere they say so and
//! pass.

#[path = "common/ci.rs"]
mod ci;
mod launch_support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};

use launch_support::{
    as_nobody, dir_of, fake_torch_dir, first_line, interpreters, is_root, listing, nobody_python,
    open_base, python_for_nobody, stats_for, Killed, NOBODY,
};

const ROLE: &str = "TORCHTOP_TEST_ROLE";

/// Runs before `main` in every process of this binary. When the binary runs as a fake `python3`
/// and someone executes it with `-I` (as the old attach did to learn the version), it leaves a
/// mark saying which uid ran it, answers like Python would, and exits.
#[used]
#[link_section = ".init_array"]
static MARK_IF_RUN_AS_PYTHON: extern "C" fn() = mark_if_run_as_python;

extern "C" fn mark_if_run_as_python() {
    let Ok(cmdline) = std::fs::read("/proc/self/cmdline") else {
        return;
    };
    if cmdline.split(|&b| b == 0).nth(1) != Some(&b"-I"[..]) {
        return;
    }
    if let Ok(exe) = std::fs::read_link("/proc/self/exe") {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let _ = std::fs::write(format!("{}.ran-as-uid-{uid}", exe.display()), "");
    }
    println!("3.11");
    std::process::exit(0);
}

fn root_or_skip() -> bool {
    if !is_root() {
        println!("skipped: these attacks need root and a second user (uid {NOBODY})");
    }
    is_root()
}

/// As root, a python that uid 65534 can run; `None` (having said why) elsewhere.
fn root_and_a_python_for_nobody() -> Option<std::path::PathBuf> {
    if !root_or_skip() {
        return None;
    }
    let python = python_for_nobody();
    if python.is_none() {
        ci::skip_or_fail(&format!("no python that uid {NOBODY} can run"));
    }
    python
}

const LOOP: &str = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.05)\n";

#[test]
fn compromise_1_attach_never_hands_over_a_directory_the_target_names() {
    let Some(python) = root_and_a_python_for_nobody() else {
        return;
    };
    let base = open_base();
    let victim = dir_of(&base.path().join("root-only"), 0, 0o700);
    std::fs::write(victim.join("secret"), "root's").unwrap();
    let target = nobody_python(&python, LOOP, &[("TORCHTOP_AGENT_DIR", &victim)]);

    let outcome = torchtop::launch::attach(target.pid());

    let meta = std::fs::metadata(&victim).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (0, 0, 0o700),
        "root's directory changed hands; attach said {outcome:?}"
    );
    assert_eq!(listing(&victim), [("secret".to_string(), 0)]);
    let err = outcome.unwrap_err();
    assert!(
        err.contains("owned by uid 0"),
        "the agent refuses root's directory: {err}"
    );
}

#[test]
fn compromise_2_attach_never_runs_the_targets_executable() {
    if !root_or_skip() {
        return;
    }
    let base = open_base();
    let home = dir_of(&base.path().join("attacker"), NOBODY, 0o755);
    let fake = home.join("python3");
    std::fs::copy(std::env::current_exe().unwrap(), &fake).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&fake, Some(NOBODY), Some(NOBODY)).unwrap();
    let mut cmd = Command::new(&fake);
    cmd.args(["helper_sleeps", "--exact", "--ignored", "--nocapture"])
        .env(ROLE, "sleep")
        .stdout(Stdio::piped());
    let mut child = as_nobody(&mut cmd).spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let target = Killed(child);
    loop {
        let line = first_line(&mut out);
        assert!(
            !line.is_empty() || target_alive(&target),
            "the fake python3 ended"
        );
        if line.contains("helper ready") {
            break;
        }
    }

    let outcome = torchtop::launch::attach(target.pid());

    let marks: Vec<_> = listing(&home)
        .into_iter()
        .filter(|(name, _)| name.contains("ran-as-uid"))
        .collect();
    assert_eq!(
        marks,
        [],
        "torchtop ran the target's executable; attach said {outcome:?}"
    );
    let err = outcome.unwrap_err();
    assert!(err.contains("is not a Python interpreter"), "{err}");
}

fn target_alive(target: &Killed) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", target.pid()))
        .is_ok_and(|s| !s.contains(") Z "))
}

/// The role of the fake `python3` in compromise 2: a process that just waits.
#[test]
#[ignore = "a helper: runs only when started by compromise_2 as the target"]
fn helper_sleeps() {
    if std::env::var(ROLE).is_ok_and(|r| r == "sleep") {
        println!("helper ready");
        std::thread::sleep(std::time::Duration::from_secs(120));
    }
}

/// The name `torchtop run` gives its site directory in this version.
fn site_dir_name() -> String {
    let scratch = tempfile::tempdir().unwrap();
    let site = torchtop::launch::prepare_site_dir(&scratch.path().join("s")).unwrap();
    site.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn compromise_3_run_never_imports_from_a_squatted_directory() {
    if !root_or_skip() {
        return;
    }
    let Some(python) = interpreters().into_iter().next() else {
        ci::skip_or_fail("no python3 is installed");
        return;
    };
    let base = open_base();
    let squat = dir_of(&base.path().join("torchtop-0"), NOBODY, 0o700);
    let site = dir_of(&squat.join(site_dir_name()), NOBODY, 0o700);
    let pwned = base.path().join("PWNED");
    let planted = format!(
        "import os\nopen({:?} + '-uid-%d' % os.getuid(), 'w').close()\n",
        pwned.display().to_string()
    );
    std::fs::write(site.join("json.py"), planted).unwrap();
    std::os::unix::fs::chown(site.join("json.py"), Some(NOBODY), Some(NOBODY)).unwrap();
    let before = listing(&site);

    let out = Command::new(env!("CARGO_BIN_EXE_torchtop"))
        .args(["run", "--"])
        .arg(&python)
        .args(["-c", "import json; print('program ran')"])
        .env("TORCHTOP_AGENT_DIR", &squat)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();

    let stderr = String::from_utf8_lossy(&out.stderr);
    let planted_ran: Vec<_> = listing(base.path())
        .into_iter()
        .filter(|(name, _)| name.starts_with("PWNED"))
        .collect();
    assert_eq!(
        planted_ran,
        [],
        "code planted by uid {NOBODY} ran as root; stderr: {stderr}"
    );
    assert_eq!(
        listing(&site),
        before,
        "root wrote into the squatted directory"
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "program ran");
    assert!(stderr.contains("owned by uid 65534"), "{stderr}");
    assert!(
        stderr.contains("runs without the torchtop agent"),
        "{stderr}"
    );
}

#[test]
fn compromise_3_attach_writes_nothing_in_the_targets_directory_yet_reads_its_socket() {
    let Some(python) = root_and_a_python_for_nobody() else {
        return;
    };
    let base = open_base();
    let theirs = dir_of(&base.path().join("agents"), NOBODY, 0o700);
    let code = "import time, torch\ntorch.cuda._fake_init([0])\nprint('ready', flush=True)\n\
                while True:\n    time.sleep(0.05)\n";
    let fake_torch = fake_torch_dir();
    let target = nobody_python(
        &python,
        code,
        &[("TORCHTOP_AGENT_DIR", &theirs), ("PYTHONPATH", &fake_torch)],
    );
    let pid = target.pid();

    let message = torchtop::launch::attach(pid).unwrap();

    let socket = format!("{pid}.sock");
    assert!(message.contains(&socket), "{message}");
    assert_eq!(
        listing(&theirs),
        [(socket, NOBODY)],
        "only the agent's own socket, made by the target's user"
    );
    let info = stats_for(&theirs, pid);
    assert_eq!(info.torch.as_deref(), Some("2.11.0+fake"));
}

/// A security review: the target made the injector fail (a soft RLIMIT_AS at its own size, so
/// the injector's mmap fails), root's attach fell back to gdb, which attaches by pid, and the
/// target handed its pid to a root process before gdb attached. As root on another user's
/// process gdb is never tried now: the fake gdb here leaves a mark if it is run.
#[test]
fn root_never_falls_back_to_gdb_on_another_users_process() {
    let Some(python) = root_and_a_python_for_nobody() else {
        return;
    };
    let base = open_base();
    let mark = base.path().join("gdb-ran");
    let gdb = base.path().join("gdb");
    std::fs::write(
        &gdb,
        format!("#!/bin/sh\ntouch {}\nexit 1\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(&gdb, std::fs::Permissions::from_mode(0o755)).unwrap();
    let code = "import resource, time\n\
                size = [l for l in open('/proc/self/status') if l.startswith('VmSize')][0]\n\
                vm = int(size.split()[1]) * 1024\n\
                resource.setrlimit(resource.RLIMIT_AS, (vm, resource.RLIM_INFINITY))\n\
                print('ready', flush=True)\n\
                while True:\n    time.sleep(0.05)\n";
    let target = nobody_python(&python, code, &[]);
    let options = torchtop::launch::AttachOptions {
        gdb: Some(gdb),
        ..torchtop::launch::AttachOptions::default()
    };
    let error = torchtop::launch::attach_with(target.pid(), &options).unwrap_err();
    assert!(
        error.contains("gdb is not tried on another user's process as root"),
        "{error}"
    );
    assert!(!mark.exists(), "gdb ran: {error}");
}
