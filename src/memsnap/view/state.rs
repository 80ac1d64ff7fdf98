//! The viewer's state machine: keys in, view state out, no I/O. It owns the opened snapshot
//! and the derived tree, which is rebuilt when the device, the name filter or the C++ folding
//! changes.

use std::collections::HashSet;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::memsnap::analysis::tree::{Tree, TreeOptions};
use crate::memsnap::model::{Action, Segment};
use crate::memsnap::LoadedSnapshot;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Tab {
    Summary,
    Holders,
    Segments,
    Timeline,
}

impl Tab {
    pub(crate) const ALL: [Tab; 4] = [Tab::Summary, Tab::Holders, Tab::Segments, Tab::Timeline];

    pub(crate) fn title(self) -> &'static str {
        match self {
            Tab::Summary => "Summary",
            Tab::Holders => "Holders",
            Tab::Segments => "Segments",
            Tab::Timeline => "Timeline",
        }
    }

    fn index(self) -> usize {
        Tab::ALL.iter().position(|&t| t == self).unwrap_or(0)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Effect {
    Redraw,
    Quit,
}

pub(crate) struct Viewer {
    pub(crate) loaded: LoadedSnapshot,
    pub(crate) colors: bool,
    pub(crate) tab: Tab,
    pub(crate) help: bool,
    /// `None`: every device.
    pub(crate) device: Option<i64>,
    pub(crate) filter: String,
    pub(crate) editing_filter: bool,
    pub(crate) fold_cpp: bool,
    pub(crate) tree: Tree,
    pub(crate) open: HashSet<usize>,
    /// The selected row of the tree.
    pub(crate) row: usize,
    /// Index into [`Viewer::segments`], and the block within it.
    pub(crate) segment: usize,
    pub(crate) block: usize,
    /// The timeline's event.
    pub(crate) cursor: usize,
    pub(crate) summary_scroll: usize,
    /// The screen as last drawn: its size, rows of a page and columns of the chart.
    pub(crate) screen: (u16, u16),
    pub(crate) page_rows: usize,
    pub(crate) chart_columns: usize,
}

impl Viewer {
    pub(crate) fn new(loaded: LoadedSnapshot, colors: bool) -> Viewer {
        let mut viewer = Viewer {
            loaded,
            colors,
            tab: Tab::Summary,
            help: false,
            device: None,
            filter: String::new(),
            editing_filter: false,
            fold_cpp: true,
            tree: Tree { nodes: Vec::new() },
            open: HashSet::new(),
            row: 0,
            segment: 0,
            block: 0,
            cursor: 0,
            summary_scroll: 0,
            screen: (80, 24),
            page_rows: 20,
            chart_columns: 60,
        };
        viewer.rebuild();
        viewer.cursor = viewer.timeline().map_or(0, |t| t.peak);
        viewer
    }

    fn rebuild(&mut self) {
        let options = TreeOptions {
            device: self.device,
            filter: self.filter.clone(),
            fold_cpp: self.fold_cpp,
        };
        self.tree = Tree::build(&self.loaded.snapshot, &options);
        self.open = self.tree.default_expanded();
        self.row = 0;
    }

    pub(crate) fn rows(&self) -> Vec<usize> {
        self.tree.rows(&self.open)
    }

    /// The segments shown: the device's, in address order.
    pub(crate) fn segments(&self) -> Vec<&Segment> {
        let mut segments: Vec<&Segment> = self
            .loaded
            .snapshot
            .segments
            .iter()
            .filter(|s| self.device.is_none() || s.device == self.device)
            .collect();
        segments.sort_by_key(|s| (s.device, s.address));
        segments
    }

    /// The timeline shown: the device's, or the first traced device's.
    pub(crate) fn timeline(&self) -> Option<&crate::memsnap::analysis::timeline::Timeline> {
        let timelines = &self.loaded.analysis.timelines;
        match self.device {
            Some(device) => timelines.iter().find(|t| t.device as i64 == device),
            None => timelines.first(),
        }
    }

    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Effect {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Effect::Quit;
        }
        if self.help {
            self.help = false;
            return Effect::Redraw;
        }
        if self.editing_filter {
            self.edit_filter(key.code);
            return Effect::Redraw;
        }
        match key.code {
            KeyCode::Char('q') => return Effect::Quit,
            KeyCode::Esc if self.filter.is_empty() => return Effect::Quit,
            KeyCode::Esc => {
                self.filter.clear();
                self.rebuild();
            }
            KeyCode::Char('?' | 'h') => self.help = true,
            KeyCode::Tab => self.tab = Tab::ALL[(self.tab.index() + 1) % 4],
            KeyCode::BackTab => self.tab = Tab::ALL[(self.tab.index() + 3) % 4],
            KeyCode::Char(c @ '1'..='4') => self.tab = Tab::ALL[c as usize - '1' as usize],
            KeyCode::Char('d') => self.next_device(),
            KeyCode::Char('/') => {
                self.tab = Tab::Holders;
                self.editing_filter = true;
            }
            code => match self.tab {
                Tab::Summary => self.summary_key(code),
                Tab::Holders => self.holders_key(code),
                Tab::Segments => self.segments_key(code),
                Tab::Timeline => self.timeline_key(code),
            },
        }
        Effect::Redraw
    }

    fn edit_filter(&mut self, code: KeyCode) {
        match code {
            KeyCode::Enter => self.editing_filter = false,
            KeyCode::Esc => {
                self.editing_filter = false;
                self.filter.clear();
                self.rebuild();
            }
            KeyCode::Backspace => {
                self.filter.pop();
                self.rebuild();
            }
            KeyCode::Char(c) if !c.is_control() && self.filter.chars().count() < 64 => {
                self.filter.push(c);
                self.rebuild();
            }
            _ => {}
        }
    }

    fn next_device(&mut self) {
        let devices: Vec<i64> = self.loaded.snapshot.devices();
        self.device = match self.device {
            None => devices.first().copied(),
            Some(d) => devices.iter().copied().find(|&x| x > d),
        };
        self.segment = 0;
        self.block = 0;
        self.cursor = self.timeline().map_or(0, |t| t.peak);
        self.rebuild();
    }

    /// A vertical move: +1, -1, a page, or to either end.
    fn moved(&self, code: KeyCode, at: usize, len: usize) -> usize {
        let last = len.saturating_sub(1);
        let page = self.page_rows.max(1);
        match code {
            KeyCode::Down | KeyCode::Char('j') => (at + 1).min(last),
            KeyCode::Up | KeyCode::Char('k') => at.saturating_sub(1),
            KeyCode::PageDown => (at + page).min(last),
            KeyCode::PageUp => at.saturating_sub(page),
            KeyCode::Home => 0,
            KeyCode::End => last,
            _ => at,
        }
    }

    fn summary_key(&mut self, code: KeyCode) {
        let (width, height) = self.screen;
        let theme = crate::terminal::theme::Theme::new(false);
        let lines = super::summary::lines(self, width, theme).len();
        let last = lines.saturating_sub(usize::from(height.saturating_sub(2)));
        self.summary_scroll = self.moved(code, self.summary_scroll, last + 1);
    }

    fn holders_key(&mut self, code: KeyCode) {
        let rows = self.rows();
        let Some(&node) = rows.get(self.row) else {
            return;
        };
        let has_children = !self.tree.nodes[node].children.is_empty();
        match code {
            KeyCode::Enter | KeyCode::Char(' ') if has_children => {
                if !self.open.remove(&node) {
                    self.open.insert(node);
                }
            }
            KeyCode::Right | KeyCode::Char('l') if has_children => {
                if !self.open.insert(node) {
                    self.row += 1;
                }
            }
            KeyCode::Left => {
                if !self.open.remove(&node) {
                    let parent = self.tree.nodes[node].parent;
                    if let Some(at) = rows.iter().position(|&r| r == parent) {
                        self.row = at;
                    }
                }
            }
            KeyCode::Char('c') => {
                self.fold_cpp = !self.fold_cpp;
                self.rebuild();
            }
            code => self.row = self.moved(code, self.row, rows.len()),
        }
    }

    fn segments_key(&mut self, code: KeyCode) {
        let segments = self.segments();
        let blocks = segments.get(self.segment).map_or(0, |s| s.blocks.len());
        match code {
            KeyCode::Right | KeyCode::Char('l') => {
                self.block = (self.block + 1).min(blocks.saturating_sub(1));
            }
            KeyCode::Left => self.block = self.block.saturating_sub(1),
            code => {
                let next = self.moved(code, self.segment, segments.len());
                if next != self.segment {
                    self.segment = next;
                    self.block = 0;
                }
            }
        }
    }

    fn timeline_key(&mut self, code: KeyCode) {
        let Some(timeline) = self.timeline() else {
            return;
        };
        let len = timeline.len();
        let column = len.div_ceil(self.chart_columns.max(1)).max(1);
        let next_marker = |kind: Action, from: usize| {
            let markers: Vec<usize> = timeline
                .markers
                .iter()
                .filter(|(_, a)| *a == kind)
                .map(|(i, _)| *i)
                .collect();
            markers
                .iter()
                .copied()
                .find(|&i| i > from)
                .or(markers.first().copied())
        };
        let last = len.saturating_sub(1);
        self.cursor = match code {
            KeyCode::Right | KeyCode::Char('j' | 'l') => (self.cursor + column).min(last),
            KeyCode::Left | KeyCode::Char('k') => self.cursor.saturating_sub(column),
            KeyCode::PageDown => (self.cursor + 10 * column).min(last),
            KeyCode::PageUp => self.cursor.saturating_sub(10 * column),
            KeyCode::Char('.') => (self.cursor + 1).min(last),
            KeyCode::Char(',') => self.cursor.saturating_sub(1),
            KeyCode::Home => 0,
            KeyCode::End => last,
            KeyCode::Char('p') => timeline.peak,
            KeyCode::Char('o') => next_marker(Action::Oom, self.cursor).unwrap_or(self.cursor),
            KeyCode::Char('s') => next_marker(Action::Snapshot, self.cursor).unwrap_or(self.cursor),
            _ => self.cursor,
        };
    }
}
