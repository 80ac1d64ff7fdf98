//! The TOML config file: thresholds and windows for the warning rules.
//!
//! This module owns the [`Config`] type, its defaults (which must equal
//! `assets/config.default.toml`, the file `--print-config` prints), and [`load`], which reads a
//! file and names the key and the line of anything wrong in it. Unknown keys are rejected so a
//! typo never silently keeps a default. Sizes are in MiB and windows in seconds of sample time.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The commented default config, as `torchtop --print-config` prints it.
pub(crate) const DEFAULT_CONFIG_TOML: &str = include_str!("../assets/config.default.toml");

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[rules.*]`: one table per warning rule.
    pub rules: RulesConfig,
    /// `[cluster]`: `torchtop cluster`.
    pub(crate) cluster: ClusterConfig,
}

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

/// One table per rule, named like the rule id with `_` for `-`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    pub(crate) oom_risk: OomRiskConfig,
    pub(crate) fragmentation: FragmentationConfig,
    pub(crate) leak: LeakConfig,
    pub(crate) gpu_starved: GpuStarvedConfig,
    pub(crate) imbalance: ImbalanceConfig,
    pub(crate) swap: SwapConfig,
    pub(crate) throttle: ThrottleConfig,
    pub(crate) zombie_memory: ZombieMemoryConfig,
    pub(crate) ecc: EccConfig,
    pub(crate) health: HealthConfig,
    pub(crate) wrong_gpu: WrongGpuConfig,
    pub(crate) training_stalled: TrainingStalledConfig,
}

/// `oom-risk`: memory near the GPU's total, and allocator OOMs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct OomRiskConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Share of the GPU's total memory that used (or a process's reserved) memory must reach.
    /// Default 0.95.
    pub(crate) memory_fraction: f64,
    /// Critical while num_ooms rose within this many seconds. Default 300.
    pub(crate) oom_window_seconds: f64,
}

impl Default for OomRiskConfig {
    fn default() -> Self {
        OomRiskConfig {
            enabled: true,
            memory_fraction: 0.95,
            oom_window_seconds: 300.0,
        }
    }
}

/// `fragmentation`: inactive-split memory and allocation retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct FragmentationConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Share of reserved memory that inactive-split memory must reach. Default 0.3.
    pub(crate) inactive_split_fraction: f64,
    /// The least inactive-split memory that counts, in MiB. Default 1024.
    pub(crate) min_inactive_split_mib: f64,
    /// Warn while num_alloc_retries rose within this many seconds. Default 60.
    pub(crate) retries_window_seconds: f64,
}

impl Default for FragmentationConfig {
    fn default() -> Self {
        FragmentationConfig {
            enabled: true,
            inactive_split_fraction: 0.3,
            min_inactive_split_mib: 1024.0,
            retries_window_seconds: 60.0,
        }
    }
}

/// `leak`: allocated memory that keeps rising as a trend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct LeakConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which memory must keep rising. Default 120.
    pub(crate) window_seconds: f64,
    /// The fewest samples in the window for a trend to count. Default 6.
    pub(crate) min_samples: u32,
    /// The least total rise over the window, in MiB. Default 256.
    pub(crate) min_rise_mib: f64,
    /// The largest fall allowed in one step, and below the window's start, in MiB. Default 64.
    pub(crate) max_fallback_mib: f64,
    /// The least share of steps that must not fall. Default 0.6.
    pub(crate) min_rising_steps_fraction: f64,
    /// The largest share of the total rise one step may carry. Default 0.5.
    pub(crate) max_single_step_fraction: f64,
}

impl Default for LeakConfig {
    fn default() -> Self {
        LeakConfig {
            enabled: true,
            window_seconds: 120.0,
            min_samples: 6,
            min_rise_mib: 256.0,
            max_fallback_mib: 64.0,
            min_rising_steps_fraction: 0.6,
            max_single_step_fraction: 0.5,
        }
    }
}

/// `gpu-starved`: GPU memory held while the SMs idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct GpuStarvedConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which utilization must stay low. Default 60.
    pub(crate) window_seconds: f64,
    /// Mean SM utilization over the window below this percentage counts as low. Default 30.
    pub(crate) max_utilization_percent: f64,
    /// The least GPU memory the process must hold, in MiB. Default 1024.
    pub(crate) min_memory_mib: f64,
    /// Mean CPU% per DataLoader worker from which the workers look saturated. Default 80.
    pub(crate) worker_busy_percent: f64,
    /// CPU% of the training process from which it looks saturated. Default 90.
    pub(crate) main_busy_percent: f64,
    /// Host CPU% from which the host looks saturated. Default 90.
    pub(crate) host_busy_percent: f64,
}

impl Default for GpuStarvedConfig {
    fn default() -> Self {
        GpuStarvedConfig {
            enabled: true,
            window_seconds: 60.0,
            max_utilization_percent: 30.0,
            min_memory_mib: 1024.0,
            worker_busy_percent: 80.0,
            main_busy_percent: 90.0,
            host_busy_percent: 90.0,
        }
    }
}

/// `imbalance`: the ranks of one job differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ImbalanceConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which the ranks are compared. Default 30.
    pub(crate) window_seconds: f64,
    /// Memory spread as a share of the largest rank's memory. Default 0.2.
    pub(crate) memory_spread_fraction: f64,
    /// The least memory spread that counts, in MiB. Default 1024.
    pub(crate) min_memory_spread_mib: f64,
    /// Utilization spread in percentage points. Default 30.
    pub(crate) utilization_spread_percent: f64,
}

impl Default for ImbalanceConfig {
    fn default() -> Self {
        ImbalanceConfig {
            enabled: true,
            window_seconds: 30.0,
            memory_spread_fraction: 0.2,
            min_memory_spread_mib: 1024.0,
            utilization_spread_percent: 30.0,
        }
    }
}

/// `swap`: host memory pressure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SwapConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which swap growth is measured. Default 60.
    pub(crate) window_seconds: f64,
    /// The least swap growth over the window, in MiB. Default 64.
    pub(crate) min_growth_mib: f64,
    /// Available RAM below this share of total counts as low. Default 0.1.
    pub(crate) available_fraction: f64,
}

impl Default for SwapConfig {
    fn default() -> Self {
        SwapConfig {
            enabled: true,
            window_seconds: 60.0,
            min_growth_mib: 64.0,
            available_fraction: 0.1,
        }
    }
}

/// The throttle-reason names the NVML collector produces.
pub(crate) const THROTTLE_REASON_NAMES: [&str; 5] = [
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
];

/// `throttle`: clocks held down by power or heat under load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ThrottleConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Utilization from which a GPU counts as under load. Default 50.
    pub(crate) min_utilization_percent: f64,
    /// The reasons that raise the warning. Default: all of [`THROTTLE_REASON_NAMES`].
    pub(crate) reasons: Vec<String>,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            enabled: true,
            min_utilization_percent: 50.0,
            reasons: THROTTLE_REASON_NAMES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

/// `zombie-memory`: GPU memory held by a pid missing from /proc.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ZombieMemoryConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// How long the pid must have been missing. Default 2.
    pub(crate) min_seconds: f64,
}

impl Default for ZombieMemoryConfig {
    fn default() -> Self {
        ZombieMemoryConfig {
            enabled: true,
            min_seconds: 2.0,
        }
    }
}

/// `ecc`: volatile ECC error counts rising.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct EccConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Warn while the counts rose within this many seconds. Default 600.
    pub(crate) window_seconds: f64,
}

impl Default for EccConfig {
    fn default() -> Self {
        EccConfig {
            enabled: true,
            window_seconds: 600.0,
        }
    }
}

/// `gpu-lost`, `gpu-unresponsive` and `driver-missing`: the GPUs and the driver themselves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct HealthConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// A GPU the driver has not answered for this long is unresponsive. Default 10.
    pub(crate) unresponsive_seconds: f64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            enabled: true,
            unresponsive_seconds: 10.0,
        }
    }
}

/// `wrong-gpu`: a process holds memory on a GPU its CUDA_VISIBLE_DEVICES does not list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct WrongGpuConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The least memory that counts, in MiB. Default 64.
    pub(crate) min_memory_mib: f64,
}

impl Default for WrongGpuConfig {
    fn default() -> Self {
        WrongGpuConfig {
            enabled: true,
            min_memory_mib: 64.0,
        }
    }
}

/// `training-stalled`: an agent still reports, but its step counter stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TrainingStalledConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Stalled once the step has not moved for this many median step times. Default 10.
    pub(crate) step_time_factor: f64,
    /// ... and for at least this many seconds (evaluation and checkpoints pause the step
    /// counter too). Default 300.
    pub(crate) min_seconds: f64,
}

impl Default for TrainingStalledConfig {
    fn default() -> Self {
        TrainingStalledConfig {
            enabled: true,
            step_time_factor: 10.0,
            min_seconds: 300.0,
        }
    }
}

/// The default config text, commented.
pub fn print_default() -> &'static str {
    DEFAULT_CONFIG_TOML
}

/// The largest config file read. The full default file is about 4 KiB; this bound keeps
/// `--config /dev/zero` (or a log file named by mistake) from eating memory.
pub(crate) const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The longest rule window, in seconds: a day. Longer windows would only thin the history.
pub(crate) const MAX_WINDOW_SECONDS: f64 = 86_400.0;

/// Reads and checks a config file. The error is one sentence naming the file, the line and the
/// key at fault. At most [`MAX_CONFIG_BYTES`] are read: a longer file is refused.
pub fn load(path: &Path) -> Result<Config, String> {
    use std::io::Read;
    let shown = crate::format::escape(&path.to_string_lossy()).into_owned();
    let cannot_read = |e: std::io::Error| format!("cannot read config file {shown}: {e}");
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot_read)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "config file {shown} is larger than 1 MiB, the most torchtop reads; \
             a rules file is a few KiB (see torchtop --print-config)"
        ));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| format!("config file {shown} is not UTF-8 text"))?;
    parse(&text).map_err(|e| format!("config file {shown}: {e}"))
}

/// Parses and checks config text; the error names the line and the key.
pub(crate) fn parse(text: &str) -> Result<Config, String> {
    let config: Config = toml::from_str(text).map_err(|e| describe_toml_error(text, &e))?;
    config
        .rules
        .check()
        .map_err(|(key, problem)| match find_key_line(text, &key) {
            Some(line) => format!("line {line}: key `{key}` {problem}"),
            None => format!("key `{key}` {problem}"),
        })?;
    Ok(config)
}

/// Turns toml's error into "line N: key `a.b.c`: what is wrong".
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    let Some(span) = error.span() else {
        return message.to_string();
    };
    let line = line_of_offset(text, span.start);
    let key = unknown_field_name(message)
        .map(|field| match table_at_line(text, line) {
            Some(table) if !key_at_line(text, line).is_some_and(|k| k.ends_with(&field)) => {
                format!("{table}.{field}")
            }
            _ => key_at_line(text, line).unwrap_or(field),
        })
        .or_else(|| key_at_line(text, line));
    match key {
        Some(key) => format!("line {line}: key `{key}`: {message}"),
        None => format!("line {line}: {message}"),
    }
}

/// The 1-based line holding a byte offset.
fn line_of_offset(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The field serde names in "unknown field `x`, expected ...".
fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// Strips a TOML comment, spaces and quotes from a key or header.
fn clean_key(raw: &str) -> String {
    raw.split('.')
        .map(|part| part.trim().trim_matches('"').trim_matches('\''))
        .collect::<Vec<_>>()
        .join(".")
}

/// The `[table]` header in effect at a 1-based line, or the header on that line itself.
fn table_at_line(text: &str, line: usize) -> Option<String> {
    text.lines()
        .take(line)
        .filter_map(header_of)
        .last()
        .filter(|t| !t.is_empty())
}

fn header_of(line: &str) -> Option<String> {
    let trimmed = line.trim();
    let inner = trimmed.strip_prefix('[')?;
    let inner = inner.split(']').next()?;
    Some(clean_key(inner.trim_start_matches('[')))
}

/// The full dotted key written on a 1-based line: its table plus the key before `=`, or the
/// header itself when the line is a `[table]` header.
fn key_at_line(text: &str, line: usize) -> Option<String> {
    let content = text.lines().nth(line.checked_sub(1)?)?;
    if let Some(header) = header_of(content) {
        return Some(header);
    }
    let (raw_key, _) = content.split_once('=')?;
    let key = clean_key(raw_key);
    if key.is_empty() || key.starts_with('#') {
        return None;
    }
    Some(match table_at_line(text, line) {
        Some(table) => format!("{table}.{key}"),
        None => key,
    })
}

/// The 1-based line where a full dotted key is set, if written out as `key = value`.
fn find_key_line(text: &str, dotted: &str) -> Option<usize> {
    (1..=text.lines().count()).find(|&line| {
        let content = text.lines().nth(line - 1).unwrap_or("");
        header_of(content).is_none() && key_at_line(text, line).as_deref() == Some(dotted)
    })
}

impl RulesConfig {
    /// Checks value ranges; on failure, the full key and what is wrong with it.
    fn check(&self) -> Result<(), (String, String)> {
        let fractions = [
            ("oom_risk.memory_fraction", self.oom_risk.memory_fraction),
            (
                "fragmentation.inactive_split_fraction",
                self.fragmentation.inactive_split_fraction,
            ),
            (
                "leak.min_rising_steps_fraction",
                self.leak.min_rising_steps_fraction,
            ),
            (
                "leak.max_single_step_fraction",
                self.leak.max_single_step_fraction,
            ),
            (
                "imbalance.memory_spread_fraction",
                self.imbalance.memory_spread_fraction,
            ),
            ("swap.available_fraction", self.swap.available_fraction),
        ];
        for (key, value) in fractions {
            if !(0.0..=1.0).contains(&value) {
                return Err(bad(key, value, "must be a fraction from 0 to 1"));
            }
        }
        let percents = [
            (
                "gpu_starved.max_utilization_percent",
                self.gpu_starved.max_utilization_percent,
            ),
            (
                "imbalance.utilization_spread_percent",
                self.imbalance.utilization_spread_percent,
            ),
            (
                "throttle.min_utilization_percent",
                self.throttle.min_utilization_percent,
            ),
            (
                "gpu_starved.host_busy_percent",
                self.gpu_starved.host_busy_percent,
            ),
        ];
        for (key, value) in percents {
            if !(0.0..=100.0).contains(&value) {
                return Err(bad(key, value, "must be a percentage from 0 to 100"));
            }
        }
        let windows = [
            (
                "oom_risk.oom_window_seconds",
                self.oom_risk.oom_window_seconds,
            ),
            (
                "fragmentation.retries_window_seconds",
                self.fragmentation.retries_window_seconds,
            ),
            ("leak.window_seconds", self.leak.window_seconds),
            (
                "gpu_starved.window_seconds",
                self.gpu_starved.window_seconds,
            ),
            ("imbalance.window_seconds", self.imbalance.window_seconds),
            ("swap.window_seconds", self.swap.window_seconds),
            ("zombie_memory.min_seconds", self.zombie_memory.min_seconds),
            ("ecc.window_seconds", self.ecc.window_seconds),
            (
                "health.unresponsive_seconds",
                self.health.unresponsive_seconds,
            ),
            (
                "training_stalled.min_seconds",
                self.training_stalled.min_seconds,
            ),
        ];
        for (key, value) in windows {
            if !(0.0..=MAX_WINDOW_SECONDS).contains(&value) {
                return Err(bad(key, value, "must be between 0 and 86400 seconds"));
            }
        }
        let non_negative = [
            (
                "fragmentation.min_inactive_split_mib",
                self.fragmentation.min_inactive_split_mib,
            ),
            ("leak.min_rise_mib", self.leak.min_rise_mib),
            ("leak.max_fallback_mib", self.leak.max_fallback_mib),
            (
                "gpu_starved.min_memory_mib",
                self.gpu_starved.min_memory_mib,
            ),
            (
                "gpu_starved.worker_busy_percent",
                self.gpu_starved.worker_busy_percent,
            ),
            (
                "gpu_starved.main_busy_percent",
                self.gpu_starved.main_busy_percent,
            ),
            (
                "imbalance.min_memory_spread_mib",
                self.imbalance.min_memory_spread_mib,
            ),
            ("swap.min_growth_mib", self.swap.min_growth_mib),
            ("wrong_gpu.min_memory_mib", self.wrong_gpu.min_memory_mib),
            (
                "training_stalled.step_time_factor",
                self.training_stalled.step_time_factor,
            ),
        ];
        for (key, value) in non_negative {
            if !value.is_finite() || value < 0.0 {
                return Err(bad(key, value, "must be a number of 0 or more"));
            }
        }
        if self.leak.min_samples < 2 {
            return Err((
                "rules.leak.min_samples".to_string(),
                format!("must be 2 or more (got {})", self.leak.min_samples),
            ));
        }
        if let Some(unknown) = self
            .throttle
            .reasons
            .iter()
            .find(|r| !THROTTLE_REASON_NAMES.contains(&r.as_str()))
        {
            return Err((
                "rules.throttle.reasons".to_string(),
                format!(
                    "has an unknown reason \"{unknown}\" (known: {})",
                    THROTTLE_REASON_NAMES.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// The longest window any rule looks back over, in seconds.
    pub(crate) fn longest_window_seconds(&self) -> f64 {
        [
            self.oom_risk.oom_window_seconds,
            self.fragmentation.retries_window_seconds,
            self.leak.window_seconds,
            self.gpu_starved.window_seconds,
            self.imbalance.window_seconds,
            self.swap.window_seconds,
            self.zombie_memory.min_seconds,
            self.ecc.window_seconds,
        ]
        .into_iter()
        .filter(|s| s.is_finite())
        .fold(0.0, f64::max)
    }
}

fn bad(key: &str, value: f64, rule: &str) -> (String, String) {
    // 1e308 would otherwise be written out in 309 digits.
    let shown = if value.abs() >= 1e9 {
        format!("{value:e}")
    } else {
        value.to_string()
    };
    (format!("rules.{key}"), format!("{rule} (got {shown})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_file_parses_to_the_rust_defaults() {
        let parsed = parse(DEFAULT_CONFIG_TOML).expect("default config parses");
        assert_eq!(parsed, Config::default());
        assert_eq!(print_default(), DEFAULT_CONFIG_TOML);
    }

    #[test]
    fn every_default_key_is_written_in_the_default_file() {
        let defaults = toml::to_string(&Config::default()).expect("serializes");
        let mut table = String::new();
        for line in defaults.lines() {
            if let Some(header) = header_of(line) {
                table = header;
            } else if let Some((key, _)) = line.split_once('=') {
                let full = format!("{table}.{}", key.trim());
                assert!(
                    find_key_line(DEFAULT_CONFIG_TOML, &full).is_some(),
                    "{full} is missing from assets/config.default.toml"
                );
            }
        }
    }

    #[test]
    fn an_empty_file_and_a_partial_file_keep_the_other_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
        let config = parse("[rules.leak]\nwindow_seconds = 30\n").unwrap();
        assert_eq!(config.rules.leak.window_seconds, 30.0);
        assert_eq!(config.rules.leak.min_samples, 6);
        assert_eq!(config.rules.oom_risk, OomRiskConfig::default());
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let text = "[rules.leak]\nwindow_seconds = 30\nwindow_secs = 30\n";
        let error = parse(text).unwrap_err();
        assert!(error.contains("line 3"), "{error}");
        assert!(error.contains("`rules.leak.window_secs`"), "{error}");
    }

    #[test]
    fn an_unknown_table_is_named_with_its_line() {
        let text = "# comment\n[rules.lek]\nwindow_seconds = 30\n";
        let error = parse(text).unwrap_err();
        assert!(error.contains("rules.lek"), "{error}");
        assert!(error.contains("line 2"), "{error}");
    }

    #[test]
    fn a_wrong_type_names_the_key_and_the_line() {
        let text = "# thresholds\n[rules]\noom_risk.memory_fraction = \"high\"\n";
        let error = parse(text).unwrap_err();
        assert!(error.contains("line 3"), "{error}");
        assert!(
            error.contains("`rules.oom_risk.memory_fraction`"),
            "{error}"
        );
        assert!(error.contains("string"), "{error}");
    }

    #[test]
    fn a_syntax_error_names_the_line() {
        let error = parse("[rules.swap]\nwindow_seconds = = 3\n").unwrap_err();
        assert!(error.contains("line 2"), "{error}");
    }

    #[test]
    fn an_out_of_range_value_names_the_key_and_the_line() {
        let text = "[rules.oom_risk]\n\nmemory_fraction = 1.5\n";
        let error = parse(text).unwrap_err();
        assert_eq!(
            error,
            "line 3: key `rules.oom_risk.memory_fraction` must be a fraction from 0 to 1 (got 1.5)"
        );
        let error = parse("[rules.throttle]\nreasons = [\"hot\"]\n").unwrap_err();
        assert!(
            error.starts_with("line 2: key `rules.throttle.reasons`"),
            "{error}"
        );
        assert!(error.contains("\"hot\""), "{error}");
    }

    #[test]
    fn load_names_the_file_and_reads_it() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let good = dir.join("good.toml");
        std::fs::write(&good, "[rules.swap]\navailable_fraction = 0.25\n").unwrap();
        assert_eq!(load(&good).unwrap().rules.swap.available_fraction, 0.25);
        let bad_file = dir.join("bad.toml");
        std::fs::write(&bad_file, "[rules.swap]\nfoo = 1\n").unwrap();
        let error = load(&bad_file).unwrap_err();
        assert!(error.contains("bad.toml"), "{error}");
        assert!(error.contains("line 2"), "{error}");
        let missing = load(&dir.join("missing.toml")).unwrap_err();
        assert!(missing.contains("cannot read config file"), "{missing}");
    }

    #[test]
    fn an_endless_file_is_refused_after_one_mib() {
        let error = load(Path::new("/dev/zero")).unwrap_err();
        assert!(error.contains("larger than 1 MiB"), "{error}");
    }

    #[test]
    fn windows_are_bounded() {
        let error = parse("[rules.leak]\nwindow_seconds = 1e308\n").unwrap_err();
        assert_eq!(
            error,
            "line 2: key `rules.leak.window_seconds` must be between 0 and 86400 seconds (got 1e308)"
        );
        assert!(parse("[rules.ecc]\nwindow_seconds = 86400\n").is_ok());
    }
}
