//! The warnings of every node, without I/O: those each node's exporter exports as
//! `torchtop_warning`, a critical `node-down` for each node whose exporter Prometheus cannot
//! scrape (its own warnings vanish with it, so without one nothing would say the node is down),
//! and a critical `exporter-down` for a node whose torchtop exporter is down while another
//! exporter (dcgm-exporter) still reports its GPUs (its figures show, but nothing watches it),
//! with the exit status of `--once` that they make.
//!
//! `torchtop serve` labels each warning with its id, severity and subject only: a warning a
//! node exports has no message here (`None`, printed as N/A), and none is made up. Its message,
//! evidence and remedy are on the node, in `torchtop` there.

use serde::Serialize;

use super::model::{printable, Node};
use super::promql::Sample;
use super::state::ClusterApp;
use crate::format::span;
use crate::model::Severity;

/// The id of the warning this view raises for a node that is down.
pub(crate) const NODE_DOWN_ID: &str = "node-down";
/// The id of the warning this view raises for a node whose torchtop exporter is down while
/// another exporter reports its GPUs.
pub(crate) const EXPORTER_DOWN_ID: &str = "exporter-down";

/// One warning of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub(crate) struct ClusterWarning {
    pub(crate) hostname: String,
    pub(crate) id: String,
    /// "critical", "warn" or "info", as the exporter's `severity` label says.
    pub(crate) severity: String,
    pub(crate) subject: String,
    /// What holds, in a sentence: this view's own for `node-down` and `exporter-down`; `None`
    /// for a warning a node exports, whose message the exporter does not export.
    pub(crate) message: Option<String>,
    /// For `node-down` and `exporter-down`: how long ago the node's torchtop exporter last
    /// answered a scrape.
    pub(crate) last_seen_seconds_ago: Option<f64>,
}

impl ClusterWarning {
    /// The severity, when the label is one torchtop writes.
    pub(crate) fn severity(&self) -> Option<Severity> {
        match self.severity.as_str() {
            "critical" => Some(Severity::Critical),
            "warn" => Some(Severity::Warn),
            "info" => Some(Severity::Info),
            _ => None,
        }
    }
}

/// The warnings the nodes export (from the warnings panel's answer), a `node-down` for each
/// node that is down and an `exporter-down` for each node whose exporter is, most severe first.
pub(crate) fn warnings(samples: &[Sample], nodes: &[Node]) -> Vec<ClusterWarning> {
    let label = |s: &Sample, name: &str| s.label(name).map(printable).unwrap_or_default();
    let mut out: Vec<ClusterWarning> = samples
        .iter()
        .filter(|s| s.value == 1.0)
        .map(|s| ClusterWarning {
            hostname: label(s, "Hostname"),
            id: label(s, "id"),
            severity: label(s, "severity"),
            subject: label(s, "subject"),
            ..Default::default()
        })
        .collect();
    out.extend(nodes.iter().filter(|n| n.down).map(node_down));
    out.extend(nodes.iter().filter(|n| n.exporter_down).map(exporter_down));
    // Most severe first; a severity torchtop does not write last, as the least known.
    let weight = |w: &ClusterWarning| std::cmp::Reverse(w.severity());
    out.sort_by(|a, b| {
        (weight(a), &a.hostname, &a.id, &a.subject).cmp(&(
            weight(b),
            &b.hostname,
            &b.id,
            &b.subject,
        ))
    });
    out.dedup();
    out
}

/// The critical warning of a node that is down.
fn node_down(node: &Node) -> ClusterWarning {
    ClusterWarning {
        hostname: node.hostname.clone(),
        id: NODE_DOWN_ID.to_string(),
        severity: "critical".to_string(),
        subject: "host".to_string(),
        message: Some(format!("{} is down: {}", node.hostname, down_reason(node))),
        last_seen_seconds_ago: node.last_seen_seconds_ago,
    }
}

/// The critical warning of a node whose GPUs another exporter reports while torchtop's
/// exporter there is down: its figures are current, but none of torchtop's checks is.
fn exporter_down(node: &Node) -> ClusterWarning {
    ClusterWarning {
        hostname: node.hostname.clone(),
        id: EXPORTER_DOWN_ID.to_string(),
        severity: "critical".to_string(),
        subject: "host".to_string(),
        message: Some(format!(
            "torchtop's exporter on {} is down: {}; its GPUs' figures are another exporter's, \
             its warnings and ranks are unknown",
            node.hostname,
            down_reason(node)
        )),
        last_seen_seconds_ago: node.last_seen_seconds_ago,
    }
}

/// Why a node is listed down, from what Prometheus knows: "last seen 42 s ago; Prometheus
/// cannot scrape its exporter at 10.0.0.3:9400". The nodes panel's DOWN row says the same.
pub(crate) fn down_reason(node: &Node) -> String {
    let seen = last_seen(node);
    let exporter = node
        .instance
        .as_deref()
        .map(|i| format!("; Prometheus cannot scrape its exporter at {i}"))
        .unwrap_or_default();
    format!("{seen}{exporter}")
}

/// When a node's torchtop exporter last answered a scrape: "last seen 42 s ago".
fn last_seen(node: &Node) -> String {
    node.last_seen_seconds_ago.map_or_else(
        || format!("not seen in the last {}", super::fetch::DOWN_WINDOW),
        |s| format!("last seen {} ago", span(s)),
    )
}

/// How many of `warnings` each node has.
pub(crate) fn count(nodes: &mut [Node], warnings: &[ClusterWarning]) {
    for node in nodes {
        node.warnings = warnings
            .iter()
            .filter(|w| w.hostname == node.hostname)
            .count();
    }
}

/// `--once`'s exit status: 1 when the nodes could not be read, and when the warnings could not
/// be and none of those at hand (`node-down`) decides it, since a check that could not look is
/// no all-clear; else by the warnings, as [`exit_status`] says.
pub(crate) fn once_status(app: &ClusterApp, fail_at: Option<Severity>) -> u8 {
    const UNREAD: u8 = 1;
    if app.stale.nodes {
        return UNREAD;
    }
    match exit_status(&app.view.warnings, fail_at) {
        0 if app.stale.warnings && fail_at.is_some() => UNREAD,
        status => status,
    }
}

/// `--once`'s exit status for these warnings, by the rule `torchtop --once` follows.
pub(crate) fn exit_status(warnings: &[ClusterWarning], fail_at: Option<Severity>) -> u8 {
    let worst = warnings.iter().filter_map(ClusterWarning::severity).max();
    crate::model::once_exit_status(worst, fail_at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn exported(host: &str, id: &str, severity: &str) -> Sample {
        let labels: BTreeMap<String, String> = [
            ("__name__", "torchtop_warning"),
            ("Hostname", host),
            ("id", id),
            ("severity", severity),
            ("subject", "gpu 0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Sample { labels, value: 1.0 }
    }

    fn down(host: &str) -> Node {
        Node {
            hostname: host.into(),
            down: true,
            last_seen_seconds_ago: Some(42.0),
            instance: Some("10.0.0.3:9400".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_that_is_down_is_a_critical_warning_that_says_since_when() {
        let up = Node {
            hostname: "node-a".into(),
            ..Default::default()
        };
        let mut nodes = vec![up, down("node-c")];
        let samples = [exported("node-a", "throttle", "warn")];
        let warnings = warnings(&samples, &nodes);
        let ids: Vec<(&str, &str, &str)> = warnings
            .iter()
            .map(|w| (w.hostname.as_str(), w.id.as_str(), w.severity.as_str()))
            .collect();
        assert_eq!(
            ids,
            [
                ("node-c", "node-down", "critical"),
                ("node-a", "throttle", "warn")
            ]
        );
        assert_eq!(
            warnings[0].message.as_deref(),
            Some(
                "node-c is down: last seen 42 s ago; Prometheus cannot scrape its exporter at \
                 10.0.0.3:9400"
            )
        );
        assert_eq!(warnings[0].last_seen_seconds_ago, Some(42.0));
        assert_eq!(warnings[1].message, None, "the exporter exports no message");
        count(&mut nodes, &warnings);
        assert_eq!((nodes[0].warnings, nodes[1].warnings), (1, 1));
    }

    /// A review: with dcgm-exporter beside it, a node whose torchtop died kept its GPU rows and
    /// lost its warnings, and nothing said so: the view read as a node with none.
    #[test]
    fn a_node_whose_torchtop_exporter_is_down_is_a_critical_warning_while_dcgm_reports_it() {
        let watched_by_dcgm_only = Node {
            hostname: "node-c".into(),
            exporter_down: true,
            last_seen_seconds_ago: Some(7.0),
            instance: Some("10.0.0.3:9400".into()),
            ..Default::default()
        };
        let mut nodes = vec![watched_by_dcgm_only];
        let warnings = warnings(&[], &nodes);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let w = &warnings[0];
        assert_eq!(
            (w.hostname.as_str(), w.id.as_str(), w.severity.as_str()),
            ("node-c", EXPORTER_DOWN_ID, "critical")
        );
        assert_eq!(
            w.message.as_deref(),
            Some(
                "torchtop's exporter on node-c is down: last seen 7 s ago; Prometheus cannot \
                 scrape its exporter at 10.0.0.3:9400; its GPUs' figures are another exporter's, \
                 its warnings and ranks are unknown"
            )
        );
        assert_eq!(w.last_seen_seconds_ago, Some(7.0));
        count(&mut nodes, &warnings);
        assert_eq!(nodes[0].warnings, 1);
        assert_eq!(exit_status(&warnings, Some(Severity::Critical)), 4);
    }

    #[test]
    fn the_exit_status_counts_a_node_down_as_torchtop_once_counts_a_critical_warning() {
        let warn = warnings(&[exported("a", "throttle", "warn")], &[]);
        let critical = Some(Severity::Critical);
        assert_eq!(exit_status(&warn, critical), 0);
        assert_eq!(exit_status(&warn, Some(Severity::Warn)), 3);
        let with_down = warnings(&[exported("a", "throttle", "warn")], &[down("c")]);
        assert_eq!(exit_status(&with_down, critical), 4);
        assert_eq!(exit_status(&with_down, None), 0, "--fail-on never");
        let odd = warnings(&[exported("a", "x", "panic")], &[]);
        assert_eq!(exit_status(&odd, Some(Severity::Warn)), 0, "not a severity");
        assert_eq!(exit_status(&[], critical), 0);
    }
}
