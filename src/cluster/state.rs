//! The cluster view's state machine: what the fetcher brought, what is stale, what is selected
//! and expanded. No I/O: keys and fetch results go in, effects come out.
//!
//! Each panel keeps its last good answer. When its query fails, the panel keeps drawing that
//! answer, marked stale, and the status line says why in a sentence.

use std::collections::BTreeSet;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde::Serialize;

use super::fetch::Fetched;
use super::model::{self, ClusterView};
use super::promql::{Range, Sample};

/// What the event loop should do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    None,
    Redraw,
    /// Fetch now instead of at the next interval.
    Refresh,
    Quit,
}

/// The panel the arrow keys move in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Focus {
    #[default]
    Nodes,
    Jobs,
}

/// Which panels show their last good answer instead of a current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub(crate) struct Stale {
    pub(crate) nodes: bool,
    pub(crate) jobs: bool,
    pub(crate) warnings: bool,
    pub(crate) history: bool,
}

impl Stale {
    pub(crate) fn any(self) -> bool {
        self.nodes || self.jobs || self.warnings || self.history
    }
}

#[derive(Debug, Clone, Default)]
struct Kept {
    nodes: Vec<Sample>,
    jobs: Vec<Sample>,
    warnings: Vec<Sample>,
    history: Vec<Range>,
}

#[derive(Debug, Clone)]
pub(crate) struct ClusterApp {
    pub(crate) url: String,
    pub(crate) straggler_percent: f64,
    pub(crate) colors: bool,
    pub(crate) view: ClusterView,
    pub(crate) stale: Stale,
    /// Sentences about the last fetch's failures and absent metrics.
    pub(crate) problems: Vec<String>,
    /// Whether any fetch has come back yet.
    pub(crate) fetched: bool,
    /// When the last fetch came back ("12:00:01"), and how long it took.
    pub(crate) updated: Option<String>,
    pub(crate) took_ms: Option<u128>,
    pub(crate) focus: Focus,
    pub(crate) selected_node: usize,
    pub(crate) selected_job: usize,
    pub(crate) expanded: BTreeSet<String>,
    kept: Kept,
}

impl ClusterApp {
    pub(crate) fn new(url: String, straggler_percent: f64, colors: bool) -> Self {
        ClusterApp {
            url,
            straggler_percent,
            colors,
            view: ClusterView::default(),
            stale: Stale::default(),
            problems: Vec::new(),
            fetched: false,
            updated: None,
            took_ms: None,
            focus: Focus::default(),
            selected_node: 0,
            selected_job: 0,
            expanded: BTreeSet::new(),
            kept: Kept::default(),
        }
    }

    /// Takes a fetch's answers: good ones replace what was kept, failed ones mark it stale.
    pub(crate) fn on_fetch(&mut self, fetched: Fetched, now_text: String) {
        let mut problems = Vec::new();
        self.stale.nodes = keep(&mut self.kept.nodes, fetched.nodes, "nodes", &mut problems);
        self.stale.jobs = keep(&mut self.kept.jobs, fetched.jobs, "jobs", &mut problems);
        self.stale.warnings = keep(
            &mut self.kept.warnings,
            fetched.warnings,
            "warnings",
            &mut problems,
        );
        self.stale.history = keep(
            &mut self.kept.history,
            fetched.history,
            "sparklines",
            &mut problems,
        );
        if !self.stale.nodes && self.kept.nodes.is_empty() {
            problems.push(
                "Prometheus has no DCGM_FI_DEV_GPU_UTIL or torchtop_gpu_state series: check \
                 that it scrapes `torchtop serve` (or dcgm-exporter) on every node"
                    .to_string(),
            );
        }
        self.problems = problems;
        self.fetched = true;
        self.updated = Some(now_text);
        self.took_ms = Some(fetched.took.as_millis());
        self.rebuild();
    }

    fn rebuild(&mut self) {
        let warnings = model::warnings(&self.kept.warnings);
        let nodes = model::nodes(&self.kept.nodes, &warnings, &self.kept.history);
        let jobs = model::jobs(&self.kept.jobs, &nodes, self.straggler_percent);
        self.view = ClusterView {
            gpu_count: nodes.iter().map(|n| n.gpus.len()).sum(),
            nodes,
            jobs,
            warnings,
        };
        self.selected_node = self
            .selected_node
            .min(self.view.nodes.len().saturating_sub(1));
        self.selected_job = self
            .selected_job
            .min(self.view.jobs.len().saturating_sub(1));
    }

    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Effect {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Effect::Quit;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => Effect::Quit,
            KeyCode::Char('j') | KeyCode::Down => self.move_by(1),
            KeyCode::Char('k') | KeyCode::Up => self.move_by(-1),
            KeyCode::Home => self.move_by(isize::MIN / 2),
            KeyCode::End => self.move_by(isize::MAX / 2),
            KeyCode::Enter => self.toggle_expanded(),
            KeyCode::Tab => {
                self.focus = match self.focus {
                    Focus::Nodes => Focus::Jobs,
                    Focus::Jobs => Focus::Nodes,
                };
                Effect::Redraw
            }
            KeyCode::Char('r') => Effect::Refresh,
            _ => Effect::None,
        }
    }

    fn move_by(&mut self, delta: isize) -> Effect {
        let (selected, count) = match self.focus {
            Focus::Nodes => (&mut self.selected_node, self.view.nodes.len()),
            Focus::Jobs => (&mut self.selected_job, self.view.jobs.len()),
        };
        let last = count.saturating_sub(1) as isize;
        *selected = (*selected as isize)
            .saturating_add(delta)
            .clamp(0, last.max(0)) as usize;
        Effect::Redraw
    }

    fn toggle_expanded(&mut self) -> Effect {
        if self.focus != Focus::Nodes {
            return Effect::None;
        }
        let Some(node) = self.view.nodes.get(self.selected_node) else {
            return Effect::None;
        };
        if !self.expanded.remove(&node.hostname) {
            self.expanded.insert(node.hostname.clone());
        }
        Effect::Redraw
    }

    /// The status line: the first problem, else what the keys do.
    pub(crate) fn status(&self) -> String {
        match self.problems.first() {
            Some(problem) if self.problems.len() > 1 => {
                format!("{problem} (and {} more)", self.problems.len() - 1)
            }
            Some(problem) => problem.clone(),
            None if !self.fetched => format!("asking Prometheus at {}...", self.url),
            None => "q quit  j/k select  Enter expand  Tab nodes/jobs  r refresh".to_string(),
        }
    }
}

/// Keeps a good answer; on failure keeps the old one and notes why. Returns whether stale.
fn keep<T>(
    kept: &mut Vec<T>,
    answer: Result<Vec<T>, String>,
    panel: &str,
    problems: &mut Vec<String>,
) -> bool {
    match answer {
        Ok(fresh) => {
            *kept = fresh;
            false
        }
        Err(why) => {
            problems.push(format!(
                "{panel}: {why}; showing the last data, marked stale"
            ));
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn gpu(host: &str, index: &str, util: f64) -> Sample {
        let labels: BTreeMap<String, String> = [
            ("__name__", "DCGM_FI_DEV_GPU_UTIL"),
            ("Hostname", host),
            ("gpu", index),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        Sample {
            labels,
            value: util,
        }
    }

    fn fetched(nodes: Result<Vec<Sample>, String>) -> Fetched {
        Fetched {
            nodes,
            jobs: Ok(vec![]),
            warnings: Ok(vec![]),
            history: Ok(vec![]),
            took: Duration::from_millis(3),
        }
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn a_failed_fetch_keeps_the_last_data_marked_stale() {
        let mut app = ClusterApp::new("http://p:9090".into(), 20.0, true);
        app.on_fetch(fetched(Ok(vec![gpu("a", "0", 50.0)])), "12:00:00".into());
        assert_eq!(app.view.nodes.len(), 1);
        assert!(!app.stale.nodes);
        app.on_fetch(
            fetched(Err("cannot reach Prometheus at http://p:9090".into())),
            "12:00:05".into(),
        );
        assert_eq!(app.view.nodes.len(), 1, "the last data stays");
        assert!(app.stale.nodes);
        assert!(
            app.status().contains("cannot reach Prometheus"),
            "{}",
            app.status()
        );
        assert!(app.status().contains("stale"));
        app.on_fetch(fetched(Ok(vec![])), "12:00:10".into());
        assert!(
            app.status().contains("no DCGM_FI_DEV_GPU_UTIL"),
            "{}",
            app.status()
        );
    }

    #[test]
    fn keys_select_expand_and_quit() {
        let mut app = ClusterApp::new("u".into(), 20.0, true);
        app.on_fetch(
            fetched(Ok(vec![gpu("a", "0", 1.0), gpu("b", "0", 2.0)])),
            "t".into(),
        );
        assert_eq!(app.on_key(key(KeyCode::Char('j'))), Effect::Redraw);
        assert_eq!(app.selected_node, 1);
        app.on_key(key(KeyCode::Char('j')));
        assert_eq!(app.selected_node, 1, "stops at the last node");
        app.on_key(key(KeyCode::Enter));
        assert!(app.expanded.contains("b"));
        app.on_key(key(KeyCode::Enter));
        assert!(app.expanded.is_empty());
        app.on_key(key(KeyCode::Char('k')));
        assert_eq!(app.selected_node, 0);
        assert_eq!(app.on_key(key(KeyCode::Char('r'))), Effect::Refresh);
        assert_eq!(app.on_key(key(KeyCode::Esc)), Effect::Quit);
        assert_eq!(app.on_key(key(KeyCode::Char('q'))), Effect::Quit);
    }
}
