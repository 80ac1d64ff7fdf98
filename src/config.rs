//! The TOML config file: thresholds and windows for the rules.
