//! What the cluster view asks Prometheus, and the background task that asks it.
//!
//! One PromQL query per panel, whatever the number of GPUs: the nodes panel selects every GPU
//! field it shows in one regex on `__name__`, the jobs panel every rank figure in another, the
//! warnings panel `torchtop_warning`, and the sparklines are one range query averaged by node.
//! The four run at once; each fails on its own and leaves the others' figures current.
//!
//! A node whose exporter died has no current series at all, so the nodes and jobs queries
//! also ask, with `or`, for what such a node exported within [`DOWN_WINDOW`]: the node itself
//! (as [`NODE_DOWN`]) and the ranks it ran (as [`RANK_LOST`]), for every target whose `up` is
//! 0 now. Without them a dead node would simply vanish from the view, and its job with it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, Notify};

use super::promql::{Client, Range, Sample};

/// How long a node that stopped reporting, and the ranks it ran, stay in the view (as PromQL's
/// duration in [`NODES_QUERY`] and [`JOBS_QUERY`]).
pub(crate) const DOWN_WINDOW: &str = "10 min";
/// The name the nodes query gives a node whose exporter Prometheus cannot scrape now; its
/// value is the seconds since the exporter last answered.
pub(crate) const NODE_DOWN: &str = "torchtop_cluster_node_down";
/// The name the jobs query gives a rank last seen on a node whose exporter is down.
pub(crate) const RANK_LOST: &str = "torchtop_cluster_rank_lost";

/// The nodes panel: every GPU field and torchtop's state of each GPU; then each `Hostname`
/// whose exporter is down (`up == 0`) and exported within the window, valued at the seconds
/// since its `up` was last 1. The host comes from the exporter's own one-per-node series, so
/// that the 10-minute look back reads two series per node, not every GPU's. The subquery's
/// 1-second step sees every scrape of a 1 s interval: a coarser one missed an exporter that
/// was up for a single scrape between two steps.
pub(crate) const NODES_QUERY: &str = concat!(
    r#"{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_POWER_USAGE|torchtop_gpu_state"}"#,
    r#" or label_replace(group by (Hostname, instance, job) (last_over_time({__name__=~"torchtop_scrape_duration_seconds|torchtop_sample_age_seconds"}[10m]))"#,
    r#" * on (instance, job) group_left () (time() - max_over_time(timestamp(up == 1)[10m:1s])"#,
    r#" and on (instance, job) (up == 0)), "__name__", "torchtop_cluster_node_down", "", "")"#,
);
/// The jobs panel: each rank's memory and step time, for processes with a job; then each rank
/// a node whose exporter is down (`up == 0`) exported within the window.
pub(crate) const JOBS_QUERY: &str = concat!(
    r#"{__name__=~"torchtop_process_gpu_memory_bytes|torchtop_step_time_seconds",training_job!=""}"#,
    r#" or label_replace(group by (training_job, Hostname, pid, rank, world_size) (last_over_time(torchtop_process_gpu_memory_bytes{training_job!=""}[10m])"#,
    r#" and on (instance, job) (up == 0)), "__name__", "torchtop_cluster_rank_lost", "", "")"#,
);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queries_name_their_down_series_as_the_model_reads_them() {
        // `concat!` takes only literals, so the names are written out twice.
        assert!(NODES_QUERY.contains(&format!(r#""__name__", "{NODE_DOWN}""#)));
        assert!(JOBS_QUERY.contains(&format!(r#""__name__", "{RANK_LOST}""#)));
        assert_eq!(DOWN_WINDOW, "10 min");
        for query in [NODES_QUERY, JOBS_QUERY] {
            assert!(query.contains("[10m"), "{query}");
            assert!(query.contains("(up == 0)"), "{query}");
        }
    }
}
