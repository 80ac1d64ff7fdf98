//! What the cluster view asks Prometheus, and the background task that asks it.
//!
//! One PromQL query per panel, whatever the number of GPUs: the nodes panel selects every GPU
//! field it shows in one regex on `__name__`, the jobs panel every rank figure in another, the
//! warnings panel `torchtop_warning`, and the sparklines are one range query averaged by node.
//! The four run at once; each fails on its own and leaves the others' figures current.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, Notify};

use super::promql::{Client, Range, Sample};

/// The nodes panel: every GPU field, and torchtop's state of each GPU.
pub(crate) const NODES_QUERY: &str = r#"{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_POWER_USAGE|torchtop_gpu_state"}"#;
/// The jobs panel: each rank's memory and step time, for processes with a job.
pub(crate) const JOBS_QUERY: &str = r#"{__name__=~"torchtop_process_gpu_memory_bytes|torchtop_step_time_seconds",training_job!=""}"#;
/// The warnings panel.
pub(crate) const WARNINGS_QUERY: &str = "torchtop_warning";
/// The sparklines: mean utilization per node.
pub(crate) const HISTORY_QUERY: &str = "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)";
/// How far back the sparklines reach, and how many points they have.
pub(crate) const HISTORY_SECONDS: f64 = 300.0;
pub(crate) const HISTORY_POINTS: f64 = 30.0;

/// The answer to each panel's query, or why there is none.
#[derive(Debug, Clone)]
pub(crate) struct Fetched {
    pub(crate) nodes: Result<Vec<Sample>, String>,
    pub(crate) jobs: Result<Vec<Sample>, String>,
    pub(crate) warnings: Result<Vec<Sample>, String>,
    pub(crate) history: Result<Vec<Range>, String>,
    /// How long the slowest query took.
    pub(crate) took: Duration,
}

/// Asks every panel's query at once.
pub(crate) async fn fetch_all(client: &Client) -> Fetched {
    let started = Instant::now();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let step = HISTORY_SECONDS / HISTORY_POINTS;
    let (nodes, jobs, warnings, history) = tokio::join!(
        client.query(NODES_QUERY),
        client.query(JOBS_QUERY),
        client.query(WARNINGS_QUERY),
        client.query_range(HISTORY_QUERY, now - HISTORY_SECONDS, now, step),
    );
    Fetched {
        nodes,
        jobs,
        warnings,
        history,
        took: started.elapsed(),
    }
}

/// Fetches every `interval`, or at once when `wake` is notified, and sends each result until
/// the receiver is gone.
pub(crate) fn spawn(
    client: Client,
    interval: Duration,
    results: mpsc::Sender<Fetched>,
    wake: Arc<Notify>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let fetched = fetch_all(&client).await;
            if results.send(fetched).await.is_err() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = wake.notified() => {}
            }
        }
    })
}
