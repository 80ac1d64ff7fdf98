//! What the user set for every command: the global flags ([`Globals`]) that the monitor, `serve`
//! and `cluster` share. The command line (`crate::cli`) builds it, so that the commands need
//! not know the command line.

use std::path::PathBuf;

/// The global flags, as the commands read them.
#[derive(Debug, Clone, PartialEq)]
pub struct Globals {
    /// `--config`: the TOML file with rule thresholds and the `[cluster]` table.
    pub config: Option<PathBuf>,
    /// `--delay`: seconds between refreshes.
    pub delay: f64,
    /// `--nvml-lib`: the NVML library to load.
    pub nvml_lib: PathBuf,
    /// Whether to draw in colour (`--no-color` and NO_COLOR turn it off).
    pub colors: bool,
}
