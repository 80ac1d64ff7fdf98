//! `torchtop run -- CMD ARGS...`: runs CMD with the agent's sitecustomize first on PYTHONPATH.

use std::convert::Infallible;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::prepare_site_dir;
use crate::collect::agent::default_socket_dir;

/// Builds the command `torchtop run` would exec: CMD with the site directory prepended to
/// `PYTHONPATH` (existing entries kept after it).
pub fn prepare_run(command: &[String]) -> Result<Command, String> {
    let (program, args) = command.split_first().ok_or_else(|| {
        "torchtop run needs a command, as in: torchtop run -- python train.py".to_string()
    })?;
    let site = prepare_site_dir(&default_socket_dir(), None)?;
    let mut python_path = OsString::from(site.as_os_str());
    if let Some(existing) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        python_path.push(":");
        python_path.push(existing);
    }
    let mut cmd = Command::new(program);
    cmd.args(args).env("PYTHONPATH", python_path);
    Ok(cmd)
}

/// Replaces torchtop with CMD (exec), so signals and the exit status are CMD's own.
pub fn run(command: &[String]) -> Result<Infallible, String> {
    let mut cmd = prepare_run(command)?;
    let err = cmd.exec();
    Err(format!("cannot run {}: {err}", command[0]))
}
