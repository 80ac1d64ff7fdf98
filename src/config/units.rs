//! Validating number types for config values. Each refuses an out-of-range value while toml
//! deserializes it, so the error carries toml's own span of the value and no separate range
//! check can forget a key.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

/// The longest rule window, in seconds: a day. Longer windows would only thin the history.
pub(crate) const MAX_WINDOW_SECONDS: f64 = 86_400.0;

/// Declares a transparent f64 newtype that accepts only `$valid` values, with `$rule` as the
/// sentence (`must be ...`) for any other.
macro_rules! bounded {
    ($(#[$doc:meta])* $name:ident, $valid:expr, $rule:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
        #[serde(transparent)]
        pub(crate) struct $name(f64);

        impl $name {
            /// A value known to be in range (the built-in defaults).
            pub(crate) const fn new(value: f64) -> Self {
                $name(value)
            }

            pub(crate) const fn get(self) -> f64 {
                self.0
            }

            fn check(value: f64) -> Result<Self, String> {
                let valid: fn(f64) -> bool = $valid;
                if valid(value) {
                    Ok($name(value))
                } else {
                    Err(format!("{} (got {})", $rule, shown(value)))
                }
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                $name::check(f64::deserialize(deserializer)?).map_err(D::Error::custom)
            }
        }
    };
}

bounded!(
    /// A share from 0 to 1.
    Fraction,
    |v| (0.0..=1.0).contains(&v),
    "must be a fraction from 0 to 1"
);
bounded!(
    /// A percentage from 0 to 100.
    Percent,
    |v| (0.0..=100.0).contains(&v),
    "must be a percentage from 0 to 100"
);
bounded!(
    /// A span of sample time from 0 to a day ([`MAX_WINDOW_SECONDS`]).
    Seconds,
    |v| (0.0..=MAX_WINDOW_SECONDS).contains(&v),
    "must be between 0 and 86400 seconds"
);
bounded!(
    /// A size in MiB, or a factor: any finite number of 0 or more.
    NonNegative,
    |v| v.is_finite() && v >= 0.0,
    "must be a number of 0 or more"
);

/// 1e308 would otherwise be written out in 309 digits.
fn shown(value: f64) -> String {
    if value.abs() >= 1e9 {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_refuses_what_is_out_of_its_range() {
        assert!(Fraction::check(1.0).is_ok());
        assert!(Fraction::check(1.01).is_err());
        assert!(Percent::check(100.0).is_ok());
        assert!(Percent::check(-1.0).is_err());
        assert!(Seconds::check(86_400.0).is_ok());
        assert_eq!(
            Seconds::check(1e308).unwrap_err(),
            "must be between 0 and 86400 seconds (got 1e308)"
        );
        assert!(NonNegative::check(f64::INFINITY).is_err());
        assert!(NonNegative::check(f64::NAN).is_err());
        assert!(NonNegative::check(0.0).is_ok());
    }
}
