//! The monitor's config file as a whole: the `[rules.*]` tables (each defined beside its rule),
//! `[cluster]` and `[ui]`. Its defaults must equal `assets/config.default.toml`, the file
//! `--print-config` prints; [`load`] reads a file and names the key and the line of anything
//! wrong in it (`crate::config` does the reading and the locating).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::{ClusterConfig, UiConfig};
use crate::rules::RulesConfig;

/// The commented default config, as `torchtop --print-config` prints it.
pub(crate) const DEFAULT_CONFIG_TOML: &str = include_str!("../../assets/config.default.toml");

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[rules.*]`: one table per warning rule.
    pub rules: RulesConfig,
    /// `[cluster]`: `torchtop cluster`.
    pub(crate) cluster: ClusterConfig,
    /// `[ui]`: the screen as F2 saved it, read leniently by [`UiConfig::from_value`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ui: Option<toml::Value>,
}

impl Config {
    /// The `[ui]` table, or the defaults and a sentence when it is garbled; `text`, the file's
    /// text, lets the sentence name the line and the key.
    pub fn ui(&self, text: Option<&str>) -> (UiConfig, Option<String>) {
        UiConfig::from_value(self.ui.as_ref(), text)
    }

    /// The checks the values' types cannot make on their own.
    fn check(&self) -> Result<(), (String, String)> {
        self.rules.check()
    }
}

/// Reads and checks a config file; the error is one sentence naming the file, the line and the
/// key at fault.
pub fn load(path: &Path) -> Result<Config, String> {
    crate::config::load(path, Config::check)
}

/// [`load`], with the file's text (for [`Config::ui`]).
pub(crate) fn load_with_text(path: &Path) -> Result<(Config, String), String> {
    crate::config::load_with_text(path, Config::check)
}

/// Parses and checks config text; the error names the line and the key.
#[cfg(test)]
pub(crate) fn parse(text: &str) -> Result<Config, String> {
    crate::config::parse(text, Config::check)
}

/// The default config text, commented.
pub fn print_default() -> &'static str {
    DEFAULT_CONFIG_TOML
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
