//! The checks a value's type cannot make on its own (fractions, percentages, windows and sizes
//! check themselves as they are read: see `units`), each failure naming its full key.

use super::{RulesConfig, THROTTLE_REASON_NAMES};

impl RulesConfig {
    /// Checks value ranges; on failure, the full key and what is wrong with it.
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        // The kills are kept an hour, so the warning cannot be held longer.
        if self.oom_killed.hold_seconds.get() > 3600.0 {
            return Err((
                "rules.oom_killed.hold_seconds".to_string(),
                format!(
                    "must be between 0 and 3600 seconds (got {})",
                    self.oom_killed.hold_seconds.get()
                ),
            ));
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
}
