//! The base of every config file: the validating value types ([`Fraction`], [`Percent`],
//! [`Seconds`], [`NonNegative`]), the bounded read and the located errors ([`load`],
//! [`parse`]), the `[ui]` table the setup screen saves, and the `[cluster]` table.
//!
//! The file's whole shape is `crate::settings::Config`; each warning rule's table lives beside
//! its rule in `crate::rules`, so that a rule and its thresholds are read together. Unknown keys
//! are rejected everywhere, so a typo never silently keeps a default. Sizes are in MiB and
//! windows in seconds of sample time.

use serde::{Deserialize, Serialize};

mod loading;
mod ui;
mod units;

pub(crate) use loading::{load, load_with_text, parse, read_text};
// Tests find where each default key is written.
#[cfg(test)]
pub(crate) use loading::key_span;
pub(crate) use units::{Fraction, NonNegative, Percent, Seconds};

pub use ui::{default_path, ThemeName, UiConfig};
pub(crate) use ui::{HistoryMetric, Panels, REFRESH_CHOICES};

/// `torchtop cluster`: where Prometheus is, and when a rank is a straggler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ClusterConfig {
    /// The Prometheus to read, as `--prometheus` gives it.
    pub(crate) prometheus: Option<String>,
    /// A rank is a straggler when its step time is more than this percent above the median.
    pub(crate) straggler_percent: f64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            prometheus: None,
            straggler_percent: 20.0,
        }
    }
}
