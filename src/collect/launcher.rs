//! Which distributed launcher started a process (torchrun, deepspeed, accelerate, mpirun...),
//! read from its parent's command line.

/// Command-line words of the distributed launchers, with the name each is reported as.
const LAUNCHERS: &[(&str, &str)] = &[
    ("torchrun", "torchrun"),
    ("torch.distributed.run", "torchrun"),
    ("torch.distributed.launch", "torch.distributed.launch"),
    ("deepspeed", "deepspeed"),
    ("deepspeed.launcher.launch", "deepspeed"),
    ("accelerate", "accelerate"),
    ("mpirun", "mpirun"),
    ("horovodrun", "horovodrun"),
];

/// The launcher a parent's command line names, if any: its program, or under a Python
/// interpreter its script or `-m` module.
pub(crate) fn launcher_in(cmdline: &str) -> Option<&'static str> {
    let basename = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let mut words = cmdline.split_whitespace();
    let program = basename(words.next()?);
    let run = if program.starts_with("python") {
        let rest: Vec<&str> = words.take(8).collect();
        let module = rest
            .iter()
            .position(|w| *w == "-m")
            .and_then(|i| rest.get(i + 1));
        basename(module.or_else(|| rest.iter().find(|w| !w.starts_with('-')))?)
    } else {
        program
    };
    LAUNCHERS
        .iter()
        .find(|(word, _)| run == *word)
        .map(|(_, name)| *name)
}
