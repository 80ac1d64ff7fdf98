//! When the hub lists the socket directory again. Listing it allocates (std's directory entries,
//! their paths), so a poll lists it only when something may have changed: the directory's
//! identity or timestamps differ from the last listing's, a socket's wait before a retry is
//! over, the last listing stopped short, or the last one is [`SAFETY_RESCAN`] old. The checks
//! of the directory itself (owner, mode, not a symlink) are not this module's: the hub makes
//! them at every poll, listing or not.
//!
//! Timestamps can miss a change: two changes within the filesystem's timestamp granularity
//! leave the same time. A listing taken while the directory's change time is that recent is
//! therefore not trusted ("racy", as git calls its index entries): the next poll lists again.
//! The change time (`ctime`) cannot be set by the directory's owner, unlike `mtime`; both are
//! compared.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The longest a listing is trusted, whatever the timestamps say.
pub(super) const SAFETY_RESCAN: Duration = Duration::from_secs(5);
/// A directory changed this recently before a listing may change again unseen within the same
/// timestamp: coarse kernel clocks tick every few milliseconds, some filesystems every second.
const RACY_WITHIN: Duration = Duration::from_secs(2);

/// What identifies one state of the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// The directory's stamp, not following a symlink; `None` when it cannot be read.
    fn of(dir: &Path) -> Option<Stamp> {
        let meta = std::fs::symlink_metadata(dir).ok()?;
        Some(Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }

    /// Whether the directory changed within [`RACY_WITHIN`] of `now` (or in the future).
    fn changed_lately(&self, now: SystemTime) -> bool {
        let Ok(now) = now.duration_since(UNIX_EPOCH) else {
            return true;
        };
        let (Ok(secs), Ok(nanos)) = (u64::try_from(self.ctime.0), u32::try_from(self.ctime.1))
        else {
            return true;
        };
        let changed = Duration::new(secs, nanos.min(999_999_999));
        changed + RACY_WITHIN > now
    }
}

/// The hub's memory of its last listing.
#[derive(Debug, Default)]
pub(crate) struct ScanClock {
    /// The directory as it was just before the last listing.
    listed: Option<Stamp>,
    listed_at: Option<Instant>,
    /// The last listing stopped short (a bound on entries or connections, an error).
    incomplete: bool,
    /// The last listing came too soon after a change to be trusted.
    racy: bool,
    /// The stamp read by the latest [`ScanClock::due`], for [`ScanClock::done`].
    pending: Option<Stamp>,
}

impl ScanClock {
    /// Whether `dir` must be listed now; `retry_due`: a socket's wait before a retry is over.
    /// Reads its stamp (one `lstat`; no allocation for a path of the usual length), before the
    /// listing that follows, so that a change made during the listing shows as a change next
    /// time.
    pub(crate) fn due(&mut self, dir: &Path, now: Instant, retry_due: bool) -> bool {
        let stamp = Stamp::of(dir);
        self.pending = stamp;
        let trusted = stamp.is_some()
            && stamp == self.listed
            && !self.incomplete
            && !self.racy
            && self.listed_at.is_some_and(|at| now < at + SAFETY_RESCAN);
        !trusted || retry_due
    }

    /// Notes a listing made after [`ScanClock::due`]; `complete`: it saw every entry it may.
    pub(crate) fn done(&mut self, now: Instant, complete: bool) {
        self.done_as_of(now, SystemTime::now(), complete);
    }

    /// [`ScanClock::done`] with the wall clock's reading `wall` (tests pass a later one).
    fn done_as_of(&mut self, now: Instant, wall: SystemTime, complete: bool) {
        self.listed = self.pending.take();
        self.listed_at = Some(now);
        self.incomplete = !complete;
        self.racy = (self.listed).is_none_or(|stamp| stamp.changed_lately(wall));
    }

    /// Whether the last listing stopped short, so that the next poll lists again.
    #[cfg(test)]
    pub(crate) fn stopped_short(&self) -> bool {
        self.incomplete
    }

    /// Forgets the last listing: the directory is gone or refused, and is listed in full once
    /// it is back.
    pub(crate) fn forget(&mut self) {
        *self = ScanClock::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock that has just listed `dir` completely, as if the listing came long after the
    /// directory's latest change (so it is not racy).
    fn listed(dir: &Path, now: Instant) -> ScanClock {
        let mut clock = ScanClock::default();
        assert!(clock.due(dir, now, false), "never listed");
        clock.done_as_of(now, SystemTime::now() + RACY_WITHIN * 2, true);
        clock
    }

    #[test]
    fn an_unchanged_directory_is_listed_again_only_after_the_safety_rescan() {
        let dir = tempfile::tempdir().unwrap();
        let now = Instant::now();
        let mut clock = listed(dir.path(), now);
        assert!(!clock.due(dir.path(), now + Duration::from_secs(1), false));
        assert!(clock.due(dir.path(), now + SAFETY_RESCAN, false));
    }

    #[test]
    fn a_new_entry_a_due_retry_a_short_listing_or_a_recent_change_make_it_due() {
        let dir = tempfile::tempdir().unwrap();
        let now = Instant::now();
        let soon = now + Duration::from_millis(100);
        let mut clock = listed(dir.path(), now);
        assert!(clock.due(dir.path(), soon, true), "a retry is due");
        assert!(!clock.due(dir.path(), now, false), "nothing changed");
        std::fs::write(dir.path().join("1.sock"), b"").unwrap();
        assert!(clock.due(dir.path(), soon, false), "a new entry");
        clock.done_as_of(soon, SystemTime::now(), true);
        assert!(
            clock.due(dir.path(), soon, false),
            "listed right after a change"
        );
        let mut clock = listed(dir.path(), now);
        clock.pending = Stamp::of(dir.path());
        clock.done_as_of(now, SystemTime::now() + RACY_WITHIN * 2, false);
        assert!(
            clock.due(dir.path(), soon, false),
            "the last listing stopped short"
        );
    }

    /// The attack: the directory's owner adds a socket and sets the directory's mtime back, to
    /// hide the change. The change time moves anyway, and no user can set it.
    #[test]
    fn setting_the_mtime_back_does_not_hide_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let now = Instant::now();
        let mut clock = listed(dir.path(), now);
        let before = std::fs::symlink_metadata(dir.path())
            .unwrap()
            .modified()
            .unwrap();
        // A change time one tick of the coarse clock later than the listing's stamp.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(dir.path().join("1.sock"), b"").unwrap();
        std::fs::File::open(dir.path())
            .unwrap()
            .set_modified(before)
            .unwrap();
        let after = std::fs::symlink_metadata(dir.path())
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(after, before, "the mtime was set back");
        assert!(clock.due(dir.path(), now, false));
    }

    #[test]
    fn a_directory_replaced_by_another_is_due() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        let now = Instant::now();
        let mut clock = listed(&dir, now);
        std::fs::rename(&dir, base.path().join("old")).unwrap();
        std::fs::create_dir(&dir).unwrap();
        assert!(clock.due(&dir, now, false));
    }
}
