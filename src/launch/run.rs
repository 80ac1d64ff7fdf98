//! `torchtop run [--record-history] -- CMD ARGS...`: runs CMD with the agent's sitecustomize first
//! on PYTHONPATH (and, with `--record-history`, `TORCHTOP_RECORD_HISTORY=all` in its environment).
//!
//! A monitoring problem never stops a training launch: when the site directory cannot be made
//! safely (a squatted or unwritable socket directory, say), CMD runs without the agent and
//! stderr says why. When CMD is a Python that will not read PYTHONPATH or sitecustomize
//! (`-I`, `-E`, `-S`, also in a `#!` line), stderr says so too.

use std::convert::Infallible;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::prepare_site_dir;
use super::target::file_name;
use crate::protocol::default_socket_dir;

/// The command `torchtop run` will exec, and what to warn about first.
#[derive(Debug)]
pub struct Prepared {
    pub command: Command,
    /// Sentences for stderr: why this program gets no agent.
    pub warnings: Vec<String>,
}

/// Builds the command: CMD with the site directory prepended to `PYTHONPATH` (existing entries
/// kept after it), or CMD unchanged with a warning when the site directory is unusable. Fails
/// only when there is no command.
pub fn prepare_run(command: &[String]) -> Result<Prepared, String> {
    prepare_run_recording(command, false)
}

/// [`prepare_run`], and with `record_history` the agent records memory history from the
/// program's first CUDA allocation (`TORCHTOP_RECORD_HISTORY`, read by the agent).
pub fn prepare_run_recording(command: &[String], record_history: bool) -> Result<Prepared, String> {
    let (program, args) = command.split_first().ok_or_else(|| {
        "torchtop run needs a command, as in: torchtop run -- python train.py".to_string()
    })?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    if record_history {
        cmd.env(RECORD_HISTORY_ENV, "all");
    }
    let mut warnings = Vec::new();
    match prepare_site_dir(&default_socket_dir()) {
        Ok(site) => {
            let mut python_path = OsString::from(site.as_os_str());
            if let Some(existing) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
                python_path.push(":");
                python_path.push(existing);
            }
            cmd.env("PYTHONPATH", python_path);
            warnings.extend(agent_blocker(program, args));
        }
        Err(e) => warnings.push(format!("{e} {program} runs without the torchtop agent.")),
    }
    Ok(Prepared {
        command: cmd,
        warnings,
    })
}

/// The variable that makes the agent record memory history from the start.
pub const RECORD_HISTORY_ENV: &str = "TORCHTOP_RECORD_HISTORY";

/// Replaces torchtop with CMD (exec), so signals and the exit status are CMD's own.
pub fn run(command: &[String], record_history: bool) -> Result<Infallible, String> {
    let mut prepared = prepare_run_recording(command, record_history)?;
    for warning in &prepared.warnings {
        say!("torchtop run: {warning}");
    }
    let err = prepared.command.exec();
    Err(format!("Cannot run {}: {err}.", command[0]))
}

fn is_python(name: &str) -> bool {
    let name = file_name(name);
    let rest = name
        .strip_prefix("python")
        .or_else(|| name.strip_prefix("pypy"));
    // python3.13t (free-threaded), python3.11d (debug), python3.7m (pymalloc).
    rest.is_some_and(|r| {
        let r = r.strip_suffix(['t', 'd', 'm']).unwrap_or(r);
        r.chars().all(|c| c.is_ascii_digit() || c == '.')
    })
}

/// Why a Python started as `program args` will not run torchtop's sitecustomize, if it won't.
fn agent_blocker(program: &str, args: &[String]) -> Option<String> {
    if is_python(program) {
        return python_flags_blocker(args).map(|why| format!("{program} {why}"));
    }
    let shebang = shebang_words(program)?;
    let mut words = shebang.iter().map(String::as_str);
    let mut interpreter = words.next()?;
    if file_name(interpreter) == "env" {
        interpreter = words.by_ref().find(|w| !w.starts_with('-'))?;
    }
    if !is_python(interpreter) {
        return None;
    }
    let flags: Vec<String> = words.map(str::to_string).collect();
    python_flags_blocker(&flags).map(|why| format!("{program} starts {interpreter}, which {why}"))
}

/// The words of `path`'s `#!` line, when it is a readable script.
fn shebang_words(path: &str) -> Option<Vec<String>> {
    let mut head = [0u8; 256];
    let len = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = head[..len].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    Some(text.split_whitespace().map(str::to_string).collect())
}

/// Interpreter options before the script, `-c` or `-m` that keep sitecustomize from running.
fn python_flags_blocker(args: &[String]) -> Option<String> {
    let mut skip_next = false;
    for arg in args {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        if arg == "--" || arg == "-" || !arg.starts_with('-') {
            return None;
        }
        if let Some(long) = arg.strip_prefix("--") {
            skip_next = long == "check-hash-based-pycs";
            continue;
        }
        for (i, flag) in arg.char_indices().skip(1) {
            let why = match flag {
                'I' => "runs in isolated mode (-I), which ignores PYTHONPATH",
                'E' => "ignores PYTHONPATH (-E)",
                'S' => "skips the site module (-S), and with it sitecustomize",
                'c' | 'm' => return None,
                'W' | 'X' => {
                    skip_next = i + 1 == arg.len();
                    break;
                }
                _ => continue,
            };
            return Some(format!(
                "{why}, so this program gets no torchtop agent. Drop that option; or start \
                 the program without torchtop and then run `torchtop attach PID`; or install the \
                 agent into that Python (`pip install ./assets/python` from torchtop's sources) \
                 and add `import torchtop_agent; torchtop_agent.start()` to the program."
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(words: &[&str]) -> Vec<String> {
        words.iter().map(std::string::ToString::to_string).collect()
    }

    #[test]
    fn python_names() {
        for name in [
            "python",
            "python3",
            "/usr/bin/python3.11",
            "python3.13t",
            "pypy3",
        ] {
            assert!(is_python(name), "{name}");
        }
        for name in ["torchrun", "pythonista", "bash", "ipython"] {
            assert!(!is_python(name), "{name}");
        }
    }

    #[test]
    fn flags_that_skip_sitecustomize() {
        let why = |args: &[&str]| python_flags_blocker(&strings(args));
        assert!(why(&["-I", "train.py"])
            .unwrap()
            .contains("isolated mode (-I)"));
        assert!(why(&["-uS", "train.py"]).unwrap().contains("-S"));
        assert!(why(&["-X", "dev", "-E", "x.py"]).unwrap().contains("-E"));
        assert!(why(&["-Wignore", "-I", "x.py"]).is_some());
        assert_eq!(why(&["-c", "import x", "-I"]), None);
        assert_eq!(why(&["-m", "torch.distributed.run", "-S"]), None);
        assert_eq!(why(&["train.py", "-I"]), None);
        assert_eq!(why(&["-u", "train.py"]), None);
        assert_eq!(
            why(&["-W", "-I", "x.py"]),
            None,
            "-I is the -W argument here"
        );
        assert_eq!(why(&["--check-hash-based-pycs", "-S", "x.py"]), None);
    }

    #[test]
    fn blockers_name_the_program_and_the_way_out() {
        let msg = agent_blocker("python3", &strings(&["-I", "t.py"])).unwrap();
        assert!(msg.starts_with("python3 runs in isolated mode"), "{msg}");
        assert!(msg.contains("torchtop_agent.start()"), "{msg}");
        // The module is not on an isolated Python's path unless installed into it.
        assert!(msg.contains("pip install ./assets/python"), "{msg}");
        assert!(msg.contains("torchtop attach PID"), "{msg}");
        assert_eq!(agent_blocker("torchrun", &strings(&["-I"])), None);
    }

    #[test]
    fn shebang_lines_count_too() {
        let temp = tempfile::tempdir().unwrap();
        let script = temp.path().join("train");
        for (line, blocked) in [
            ("#!/usr/bin/python3 -I\n", true),
            ("#!/usr/bin/env -S python3 -E\n", true),
            ("#!/usr/bin/env python3\n", false),
            ("#!/bin/sh -e\n", false),
            ("print(1)\n", false),
        ] {
            std::fs::write(&script, line).unwrap();
            let found = agent_blocker(script.to_str().unwrap(), &[]);
            assert_eq!(found.is_some(), blocked, "{line}: {found:?}");
        }
    }
}
