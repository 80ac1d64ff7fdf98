//! The cluster view's state machine: what the fetcher brought, what is stale, what is selected
//! and expanded. No I/O: keys and fetch results go in, effects come out.
//!
//! Each panel keeps its last good answer. When its query fails, the panel keeps drawing that
//! answer, marked stale, and the status line says why in a sentence. A panel that has no
//! answer yet (the first fetch failed, as in a `--once` run) says it could not be read: an
//! empty list would claim there is nothing.

use std::collections::BTreeSet;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde::Serialize;

use super::fetch::Fetched;
use super::model::{self, ClusterView};
use super::promql::{Range, Sample};
use super::warnings;

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

/// The panels that list things, each of which can be unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listed {
    Nodes,
    Jobs,
    Warnings,
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

/// One panel's last good answer, when it came, and why the latest fetch brought none.
#[derive(Debug, Clone)]
pub(crate) struct Panel<T> {
    data: Option<Vec<T>>,
    read_at: Option<String>,
    pub(crate) error: Option<String>,
}

impl<T> Default for Panel<T> {
    fn default() -> Self {
        Panel {
            data: None,
            read_at: None,
            error: None,
        }
    }
}

impl<T> Panel<T> {
    fn data(&self) -> &[T] {
        self.data.as_deref().unwrap_or_default()
    }

    /// Takes a fetch's answer: a good one replaces the kept one; a failure keeps it and notes
    /// why in a sentence that says what is shown instead.
    fn take(
        &mut self,
        answer: Result<Vec<T>, String>,
        name: &str,
        now_text: &str,
    ) -> Option<String> {
        match answer {
            Ok(fresh) => {
                self.data = Some(fresh);
                self.read_at = Some(now_text.to_string());
                self.error = None;
                None
            }
            Err(why) => {
                let problem = match &self.read_at {
                    Some(at) => format!(
                        "the {name} could not be read: {why}; showing those of {at}, marked stale"
                    ),
                    None => format!("the {name} could not be read: {why}"),
                };
                self.error = Some(why);
                Some(problem)
            }
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Kept {
    nodes: Panel<Sample>,
    jobs: Panel<Sample>,
    warnings: Panel<Sample>,
    history: Panel<Range>,
}

#[derive(Debug, Clone)]
pub(crate) struct ClusterApp {
    pub(crate) url: String,
    pub(crate) straggler_percent: f64,
    pub(crate) colors: bool,
    pub(crate) view: ClusterView,
    pub(crate) stale: Stale,
    /// Which panels have never been read: they show why, not an empty list.
    pub(crate) unread: Stale,
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
            unread: Stale::default(),
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
        let kept = &mut self.kept;
        let mut problems: Vec<String> = [
            kept.nodes.take(fetched.nodes, "nodes", &now_text),
            kept.jobs.take(fetched.jobs, "jobs", &now_text),
            kept.warnings.take(fetched.warnings, "warnings", &now_text),
            kept.history.take(fetched.history, "sparklines", &now_text),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.stale = Stale {
            nodes: kept.nodes.error.is_some(),
            jobs: kept.jobs.error.is_some(),
            warnings: kept.warnings.error.is_some(),
            history: kept.history.error.is_some(),
        };
        self.unread = Stale {
            nodes: kept.nodes.data.is_none(),
            jobs: kept.jobs.data.is_none(),
            warnings: kept.warnings.data.is_none(),
            history: kept.history.data.is_none(),
        };
        if !self.stale.nodes && kept.nodes.data().is_empty() {
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

    /// The panels that show an earlier answer, marked stale: those whose fetch failed and
    /// that have one. A panel never read says so instead.
    pub(crate) fn stale_shown(&self) -> Stale {
        Stale {
            nodes: self.stale.nodes && !self.unread.nodes,
            jobs: self.stale.jobs && !self.unread.jobs,
            warnings: self.stale.warnings && !self.unread.warnings,
            history: self.stale.history && !self.unread.history,
        }
    }

    /// Why a panel could not be read, when it has never been: what it shows instead of data.
    pub(crate) fn unread_reason(&self, panel: Listed) -> Option<&str> {
        let kept = match panel {
            Listed::Nodes => &self.kept.nodes,
            Listed::Jobs => &self.kept.jobs,
            Listed::Warnings => &self.kept.warnings,
        };
        kept.data.is_none().then(|| {
            kept.error
                .as_deref()
                .unwrap_or("Prometheus has not answered yet")
        })
    }

    fn rebuild(&mut self) {
        let mut nodes = model::nodes(self.kept.nodes.data(), self.kept.history.data());
        let warnings = warnings::warnings(self.kept.warnings.data(), &nodes);
        warnings::count(&mut nodes, &warnings);
        let jobs = model::jobs(self.kept.jobs.data(), &nodes, self.straggler_percent);
        self.view = ClusterView {
            gpu_count: nodes.iter().map(|n| n.gpus.len()).sum(),
            nodes_down: nodes.iter().filter(|n| n.down).count(),
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
    fn a_panel_never_read_says_so_and_claims_no_earlier_data() {
        let mut app = ClusterApp::new("http://p:9090".into(), 20.0, true);
        let refused = || Err("cannot reach Prometheus at http://p:9090".to_string());
        app.on_fetch(fetched(refused()), "12:00:00".into());
        assert_eq!(
            app.problems,
            ["the nodes could not be read: cannot reach Prometheus at http://p:9090"]
        );
        assert!(app.unread.nodes && !app.unread.jobs);
        assert!(!app.stale_shown().any(), "there is no earlier data to show");
        assert_eq!(
            app.unread_reason(Listed::Nodes),
            Some("cannot reach Prometheus at http://p:9090")
        );
        app.on_fetch(fetched(Ok(vec![gpu("a", "0", 1.0)])), "12:00:05".into());
        app.on_fetch(fetched(refused()), "12:00:10".into());
        assert!(
            app.problems[0].ends_with("showing those of 12:00:05, marked stale"),
            "{:?}",
            app.problems
        );
        assert!(app.stale_shown().nodes && app.unread_reason(Listed::Nodes).is_none());
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
