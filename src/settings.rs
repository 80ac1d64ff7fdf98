//! What the user set for every command: the global flags ([`Globals`]) that the monitor, `serve`
//! and `cluster` share, and `--fail-on` ([`FailOn`]), which `--once` and `cluster --once`
//! share. The command line (`crate::cli`) builds them, so that the commands need not know the
//! command line. [`Config`] is the config file's whole shape (`file`), and
//! [`MonitorConfig`] is the config file the monitor starts from.

use std::path::PathBuf;

mod file;

pub use file::{load, print_default, Config};
// The `[rules]` table is part of the file's public shape (`Config::rules`).
pub use crate::rules::RulesConfig;

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

/// The longest delay or timeout accepted: a day. Anything longer is a typo, and every
/// duration must stay far below what `Duration::from_secs_f64` can hold.
pub const MAX_SECONDS: f64 = 86_400.0;

/// `-d`/`--delay` of the monitor, `record` and `serve`: 0.1 s to a day.
pub(crate) fn parse_delay(text: &str) -> Result<f64, String> {
    parse_seconds(text, "delay", 0.1)
}

/// A number of seconds from `min` to [`MAX_SECONDS`], or a sentence saying the range.
pub(crate) fn parse_seconds(text: &str, what: &str, min: f64) -> Result<f64, String> {
    let shown = crate::format::escape(text);
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{shown}' is not a number of seconds"))?;
    if !(min..=MAX_SECONDS).contains(&value) {
        return Err(format!(
            "the {what} must be between {min} and {MAX_SECONDS} seconds, not {shown}"
        ));
    }
    Ok(value)
}

/// Which warnings make `--once` fail (`--fail-on`), for `torchtop --once` and `torchtop
/// cluster --once` alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FailOn {
    /// Always exit 0.
    Never,
    /// Exit 4 while a critical warning holds.
    #[default]
    Critical,
    /// Also exit 3 while a warning at warn level holds.
    Warn,
}

impl FailOn {
    /// The least severity that fails; `None` for never.
    pub fn threshold(self) -> Option<crate::model::Severity> {
        match self {
            FailOn::Never => None,
            FailOn::Critical => Some(crate::model::Severity::Critical),
            FailOn::Warn => Some(crate::model::Severity::Warn),
        }
    }
}

/// The config file as the monitor reads it at start: `--config`, or else
/// `$XDG_CONFIG_HOME/torchtop/config.toml` when it exists, and its `[ui]` table.
#[derive(Debug, Clone)]
pub struct MonitorConfig {
    pub config: Config,
    /// Where the setup screen (F2) saves: the file read, or the default place for one.
    pub path: Option<PathBuf>,
    pub ui: crate::config::UiConfig,
    /// Why the `[ui]` table could not be used, for the status line.
    pub notice: Option<String>,
}

impl MonitorConfig {
    /// Reads `explicit` (`--config`), or the default file when there is one. A missing default
    /// file is no error: it is where F2 will save.
    pub fn load(explicit: Option<&std::path::Path>) -> Result<Self, String> {
        let path = explicit
            .map(std::path::Path::to_path_buf)
            .or_else(crate::config::default_path);
        let (config, text) = match &path {
            Some(p) if explicit.is_some() || p.exists() => {
                let (config, text) = file::load_with_text(p)?;
                (config, Some(text))
            }
            _ => (Config::default(), None),
        };
        let (ui, notice) = config.ui(text.as_deref());
        Ok(MonitorConfig {
            config,
            path,
            ui,
            notice,
        })
    }

    /// Seconds between refreshes: `--delay` when given, else the saved rate, else `default`.
    pub fn delay(&self, given: Option<f64>, default: f64) -> f64 {
        given.or(self.ui.refresh_seconds).unwrap_or(default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_given_delay_beats_the_saved_one_which_beats_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[ui]\nrefresh_seconds = 3.0\n").unwrap();
        let monitor = MonitorConfig::load(Some(&path)).unwrap();
        assert_eq!(monitor.delay(Some(0.5), 1.0), 0.5);
        assert_eq!(monitor.delay(None, 1.0), 3.0);
        assert_eq!(monitor.path.as_deref(), Some(path.as_path()));
        std::fs::write(&path, "").unwrap();
        assert_eq!(
            MonitorConfig::load(Some(&path)).unwrap().delay(None, 1.0),
            1.0
        );
    }

    #[test]
    fn a_missing_explicit_file_is_an_error_and_a_bad_rule_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.toml");
        let error = MonitorConfig::load(Some(&missing)).unwrap_err();
        assert!(error.starts_with("cannot read config file"), "{error}");
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[rules.leak]\nwindow_seconds = -1\n[ui]\ntheme = 3\n").unwrap();
        assert!(MonitorConfig::load(Some(&bad)).is_err());
        std::fs::write(&bad, "[ui]\ntheme = 3\n").unwrap();
        let monitor = MonitorConfig::load(Some(&bad)).unwrap();
        let notice = monitor.notice.unwrap();
        assert!(
            notice.starts_with("config [ui] not used: line 2: key `ui.theme`"),
            "{notice}"
        );
    }
}
