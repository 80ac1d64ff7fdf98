//! An out-of-memory error that an agent reported: which process, how much it asked for, what
//! was free, and the snapshot the agent wrote for it.

use serde::{Deserialize, Serialize};

/// One CUDA OOM in one process, as its agent reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct OomReport {
    pub pid: u32,
    /// The user the process's agent serves (the owner of its socket directory), where known.
    #[serde(default)]
    pub uid: Option<u32>,
    /// The process's command line when the report arrived, where known.
    pub command: Option<String>,
    /// The torch device (`cuda:N`, the process's own numbering).
    pub device: Option<u32>,
    pub requested_bytes: Option<u64>,
    pub device_free_bytes: Option<u64>,
    /// What PyTorch passes its OOM observers as the device's allocated memory (its total, or the
    /// allowed maximum under a memory fraction).
    pub device_allocated_bytes: Option<u64>,
    /// The snapshot written at the OOM, as the agent named it.
    pub snapshot_path: Option<String>,
    /// Why the agent wrote no snapshot, when it tried.
    pub snapshot_error: Option<String>,
    /// When it happened, seconds since the epoch (the agent's clock, else the time it arrived).
    pub unix_seconds: f64,
    /// The program's `step()` count when it happened, where its agent said; a later count from
    /// the same process says it caught the error and went on.
    #[serde(default)]
    pub step: Option<u64>,
}

/// A snapshot file an agent wrote because the user asked for the memory viewer (`S`), ready
/// for the event loop to read. `request` tells one request from the next.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemsnapReady {
    pub request: u64,
    pub pid: u32,
    /// Where the file is, for the viewer's title and messages.
    pub path: std::path::PathBuf,
    /// The file as the sampler opened and checked it, read as it is: opening `path` again
    /// would follow whatever a user put at it meanwhile. `None` only in tests.
    pub file: Option<OpenedFile>,
}

/// A file opened by one thread for another to read; equal only to itself.
#[derive(Debug, Clone)]
pub struct OpenedFile(pub std::sync::Arc<std::fs::File>);

impl PartialEq for OpenedFile {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for OpenedFile {}
