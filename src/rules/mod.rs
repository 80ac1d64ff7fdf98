//! Warnings as pure functions of the snapshot history.
