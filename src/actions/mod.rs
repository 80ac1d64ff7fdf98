//! Signals and renice, with identity checks and typed errors.
