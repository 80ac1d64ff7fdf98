//! The `w` view's state: a list of warning groups the user walks with the keys or the mouse,
//! the groups opened to their members, and the one warning whose evidence and remedy are open.
//! The selection follows the same warning across refreshes, and an open warning stays readable
//! after it clears. The keys and clicks that change it are in [`super::warnings_keys`].

use std::collections::BTreeSet;

use crate::model::{Snapshot, Subject, Warning};

use super::layout::WarningsViewArea;
use super::view::first_visible_row;
use super::warning_groups::{self, Cause, Group, GroupKey};

/// How deep the view is open; Esc goes back one level.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) enum Level {
    #[default]
    Closed,
    List,
    /// One warning's evidence and remedy.
    Detail(Detail),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Detail {
    /// A copy, so that the text stays while the user reads it even if the warning clears.
    pub(crate) warning: Warning,
    /// The warning is no longer raised.
    pub(crate) cleared: bool,
    /// Lines scrolled past at the top.
    pub(crate) scroll: u16,
}

/// One row of the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// A group of one warning: the warning itself.
    Single { group: usize },
    /// A group of several, opened or not.
    Header { group: usize },
    /// One member of an opened group.
    Member { group: usize, position: usize },
}

impl Entry {
    pub(crate) fn group(self) -> usize {
        match self {
            Entry::Single { group } | Entry::Header { group } | Entry::Member { group, .. } => {
                group
            }
        }
    }
}

/// What the selection points at, to find it again after a refresh.
#[derive(Debug, Clone, PartialEq)]
struct EntryKey {
    group: GroupKey,
    /// The member's subject, for a member row.
    member: Option<Subject>,
}

/// What `g` selects in the monitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Process(u32),
    Gpu(u32),
    Job(String),
    Host,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct WarningsView {
    pub(crate) level: Level,
    /// The groups of the current snapshot, in display order (the panel uses them too).
    pub(crate) groups: Vec<Group>,
    /// The groups opened to their members.
    pub(crate) opened: BTreeSet<GroupKey>,
    pub(crate) entries: Vec<Entry>,
    pub(crate) selected: usize,
    /// The first entry on screen; drawing uses [`WarningsView::first_visible`].
    pub(crate) offset: usize,
    /// Where the last frame put the view.
    pub(crate) area: WarningsViewArea,
    selected_key: Option<EntryKey>,
    /// What regrouping keeps between snapshots.
    grouper: warning_groups::Grouper,
    /// The most groups the panel has had rows for lately, and when (snapshot time).
    held: (usize, f64),
}

/// How long the warnings panel keeps rows for warnings that went: throttle warnings that come
/// and go every few seconds moved the process table under the user's mouse at each change.
const HOLD_ROWS_SECONDS: f64 = 30.0;

impl WarningsView {
    pub(crate) fn is_open(&self) -> bool {
        self.level != Level::Closed
    }

    /// Regroups after a new snapshot, keeping the selection on the same warning or group.
    pub(crate) fn refresh(&mut self, snapshot: &Snapshot) {
        // The same warnings make the same groups and entries: only a detail shown is renewed.
        if self.grouper.regroup(snapshot, &mut self.groups) {
            let groups = &self.groups;
            self.opened.retain(|k| groups.iter().any(|g| &g.key == k));
            self.rebuild_entries(snapshot);
        }
        self.hold_rows(snapshot.unix_seconds);
        if let Level::Detail(detail) = &mut self.level {
            let now = snapshot
                .warnings
                .iter()
                .find(|w| w.id == detail.warning.id && w.subject == detail.warning.subject);
            match now {
                Some(warning) => {
                    detail.warning = warning.clone();
                    detail.cleared = false;
                }
                None => detail.cleared = true,
            }
        }
    }

    /// Lines the panel keeps room for: the groups now, or more if there were more within
    /// [`HOLD_ROWS_SECONDS`], so that the table below does not jump as warnings come and go.
    pub(crate) fn panel_rows(&self) -> usize {
        self.groups.len().max(self.held.0)
    }

    fn hold_rows(&mut self, now: f64) {
        let (rows, since) = self.held;
        // Time going back (a replay's jump) starts the hold afresh.
        let expired = !(since..since + HOLD_ROWS_SECONDS).contains(&now);
        if self.groups.len() >= rows || expired {
            self.held = (self.groups.len(), now);
        }
    }

    fn rebuild_entries(&mut self, snapshot: &Snapshot) {
        self.entries.clear();
        for (index, group) in self.groups.iter().enumerate() {
            if group.is_single() {
                self.entries.push(Entry::Single { group: index });
                continue;
            }
            self.entries.push(Entry::Header { group: index });
            if self.opened.contains(&group.key) {
                self.entries
                    .extend((0..group.members.len()).map(|position| Entry::Member {
                        group: index,
                        position,
                    }));
            }
        }
        let found = self.selected_key.as_ref().and_then(|key| {
            self.entries
                .iter()
                .position(|&e| self.entry_is(e, snapshot, key))
        });
        self.selected = found.unwrap_or(self.selected);
        self.select(self.selected, snapshot);
    }

    /// Whether `entry` is what `key` points at: `key_of(entry) == Some(key)`, without making
    /// the key.
    fn entry_is(&self, entry: Entry, snapshot: &Snapshot, key: &EntryKey) -> bool {
        let Some(group) = self.groups.get(entry.group()) else {
            return false;
        };
        let member = match entry {
            Entry::Member { position, .. } => match group.member(snapshot, position) {
                Some(warning) => Some(&warning.subject),
                None => return false,
            },
            _ => None,
        };
        group.key == key.group && member == key.member.as_ref()
    }

    fn key_of(&self, entry: Entry, snapshot: &Snapshot) -> Option<EntryKey> {
        let group = self.groups.get(entry.group())?;
        let member = match entry {
            Entry::Member { position, .. } => {
                Some(group.member(snapshot, position)?.subject.clone())
            }
            _ => None,
        };
        Some(EntryKey {
            group: group.key.clone(),
            member,
        })
    }

    /// Selects entry `index` (clamped) and remembers what it is.
    pub(crate) fn select(&mut self, index: usize, snapshot: &Snapshot) {
        self.selected = index.min(self.entries.len().saturating_sub(1));
        let entry = self.entries.get(self.selected).copied();
        // The key made again only when the selection points elsewhere now.
        let same = match (entry, &self.selected_key) {
            (Some(entry), Some(key)) => self.entry_is(entry, snapshot, key),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.selected_key = entry.and_then(|e| self.key_of(e, snapshot));
        }
        self.offset = self.first_visible();
    }

    pub(crate) fn selected_entry(&self) -> Option<Entry> {
        self.entries.get(self.selected).copied()
    }

    /// The warning an entry shows, for a single warning or a member.
    pub(crate) fn warning_of<'a>(
        &self,
        entry: Entry,
        snapshot: &'a Snapshot,
    ) -> Option<&'a Warning> {
        let group = self.groups.get(entry.group())?;
        match entry {
            Entry::Single { .. } => group.member(snapshot, 0),
            Entry::Member { position, .. } => group.member(snapshot, position),
            Entry::Header { .. } => None,
        }
    }

    /// The index of the first entry drawn, so that the selection is on screen.
    pub(crate) fn first_visible(&self) -> usize {
        first_visible_row(
            self.offset,
            self.selected,
            self.list_rows(),
            self.entries.len(),
        )
    }

    pub(crate) fn list_rows(&self) -> usize {
        usize::from(self.area.body.height).max(1)
    }

    /// Opens the list on its first line, the most severe. The selection of an earlier list is
    /// not kept: while the list was closed it followed its warning, and an OOM that came first
    /// since would open the list with the second line selected.
    pub(crate) fn open_list(&mut self, snapshot: &Snapshot) {
        self.level = Level::List;
        self.offset = 0;
        self.select(0, snapshot);
    }

    /// Opens or closes the selected group; returns false on a row that is not a group.
    pub(crate) fn toggle_group(&mut self, open: Option<bool>, snapshot: &Snapshot) -> bool {
        let Some(entry) = self.selected_entry() else {
            return false;
        };
        let key = self.groups[entry.group()].key.clone();
        let is_open = self.opened.contains(&key);
        let want = open.unwrap_or(!is_open);
        match entry {
            Entry::Single { .. } => return false,
            // Enter on a member shows it; only Left closes its group from there.
            Entry::Member { .. } if want || open.is_none() => return false,
            // Closing from a member selects the group's line, which stays.
            Entry::Member { .. } => {
                self.selected_key = self.key_of(
                    Entry::Header {
                        group: entry.group(),
                    },
                    snapshot,
                );
            }
            Entry::Header { .. } => {}
        }
        if want {
            self.opened.insert(key);
        } else {
            self.opened.remove(&key);
        }
        self.rebuild_entries(snapshot);
        true
    }

    /// Opens the evidence and remedy of the selected warning; false on a group's line.
    pub(crate) fn open_detail(&mut self, snapshot: &Snapshot) -> bool {
        let Some(warning) = self
            .selected_entry()
            .and_then(|e| self.warning_of(e, snapshot))
        else {
            return false;
        };
        self.level = Level::Detail(Detail {
            warning: warning.clone(),
            cleared: false,
            scroll: 0,
        });
        true
    }

    /// Scrolls the open detail by `lines` (negative: up), within its text.
    pub(crate) fn scroll_detail(&mut self, lines: i32) {
        let most = self.area.detail_max_scroll;
        if let Level::Detail(detail) = &mut self.level {
            let moved = i32::from(detail.scroll) + lines;
            detail.scroll = u16::try_from(moved.max(0)).unwrap_or(u16::MAX).min(most);
        }
    }

    /// Records where this frame puts the view, keeping the selection and the scroll inside it.
    pub(crate) fn set_area(&mut self, area: WarningsViewArea) {
        self.area = area;
        self.offset = self.first_visible();
        self.scroll_detail(0);
    }

    /// What `g` selects: the open warning's subject, or the selected entry's (a group's cause).
    pub(crate) fn target(&self, snapshot: &Snapshot) -> Option<Target> {
        if let Level::Detail(detail) = &self.level {
            return Some(target_of_subject(&detail.warning.subject));
        }
        let entry = self.selected_entry()?;
        if let Some(warning) = self.warning_of(entry, snapshot) {
            return Some(target_of_subject(&warning.subject));
        }
        Some(match &self.groups.get(entry.group())?.key.cause {
            Cause::Job(id) => Target::Job(id.clone()),
            Cause::Gpu(index) => Target::Gpu(*index),
            Cause::Process(pid) => Target::Process(*pid),
            Cause::Host => Target::Host,
        })
    }

    /// The entry drawn at screen row `y`, if the list is shown and has one there.
    pub(crate) fn entry_at(&self, column: u16, y: u16) -> Option<usize> {
        let body = self.area.body;
        let inside = column >= body.x && column < body.right() && y >= body.y && y < body.bottom();
        if !inside || !matches!(self.level, Level::List) {
            return None;
        }
        let index = self.first_visible() + usize::from(y - body.y);
        (index < self.entries.len()).then_some(index)
    }
}

fn target_of_subject(subject: &Subject) -> Target {
    match subject {
        Subject::Process { pid } => Target::Process(*pid),
        Subject::Gpu { index } => Target::Gpu(*index),
        Subject::Job { id } => Target::Job(id.clone()),
        Subject::Host => Target::Host,
    }
}
