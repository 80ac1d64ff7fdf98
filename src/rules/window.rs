//! The bounded, time-ordered windows the engine keeps, the points it records in them, the
//! read-only [`Inputs`] a rule sees, and the sums the rules take over a window.

use std::collections::BTreeMap;

use super::order::{JobIndex, PidIndex};
use super::training_stalled::StepTrack;
use crate::model::{GpuProcess, Job, Snapshot};

/// The most points one window keeps; past it the older half is thinned to every second point,
/// so a long window at a fast refresh keeps its time span at a coarser grain.
pub(super) const MAX_POINTS: usize = 4096;

/// How many points out of a window wait before they are dropped together.
const DROP_BATCH: usize = 16;

/// One value at one sample time (seconds since the epoch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point<T> {
    pub(crate) t: f64,
    pub(crate) v: T,
}

/// A time-ordered, bounded series of points. Points that fell out of the window are dropped
/// from the front [`DROP_BATCH`] at a time (or when the Vec is full), not one a push: one
/// memmove of a whole window per process per tick cost a thousand GPU processes about 12 MB
/// of copying a tick.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Window<T> {
    pub(super) points: Vec<Point<T>>,
    /// Where the live points begin in `points`; those before it are out of the window.
    start: usize,
}

impl<T> Default for Window<T> {
    fn default() -> Self {
        Window {
            points: Vec::new(),
            start: 0,
        }
    }
}

impl<T> Window<T> {
    /// Adds a point and forgets what is older than `keep_seconds` before it, keeping one point
    /// at or before that edge so a full window always has its starting point.
    pub(crate) fn push(&mut self, t: f64, v: T, keep_seconds: f64) {
        if !t.is_finite() {
            return;
        }
        match self.points.last() {
            // The clock went back: the old points no longer line up with the new ones.
            Some(last) if t < last.t => self.clear(),
            Some(last) if t == last.t => {
                self.points.pop();
                self.start = self.start.min(self.points.len());
            }
            _ => {}
        }
        // Dropped points use only spare capacity: the window never grows its Vec for them.
        if self.points.len() == self.points.capacity() {
            self.drop_old();
        }
        self.points.push(Point { t, v });
        let cutoff = t - keep_seconds;
        let older = count_before(self.live(), cutoff, Edge::Inclusive);
        self.start += older.saturating_sub(1);
        if self.start >= DROP_BATCH {
            self.drop_old();
        }
        if self.len() > MAX_POINTS {
            self.thin();
        }
    }

    /// The points in the window, oldest first.
    pub(crate) fn live(&self) -> &[Point<T>] {
        &self.points[self.start..]
    }

    /// How many points are in the window.
    pub(crate) fn len(&self) -> usize {
        self.points.len() - self.start
    }

    /// Moves the live points to the front.
    fn drop_old(&mut self) {
        self.points.drain(..self.start);
        self.start = 0;
    }

    fn clear(&mut self) {
        self.points.clear();
        self.start = 0;
    }

    /// Thins the older half of the live points to every second one.
    fn thin(&mut self) {
        self.drop_old();
        let half = self.points.len() / 2;
        let mut i = 0;
        self.points.retain(|_| {
            let keep = i >= half || i % 2 == 0;
            i += 1;
            keep
        });
    }

    pub(crate) fn latest(&self) -> Option<&Point<T>> {
        self.points.last()
    }

    /// The points spanning at least the last `seconds`, starting at the newest point at or
    /// before that edge; `None` while the window has not been watched that long.
    pub(crate) fn covering(&self, seconds: f64) -> Option<&[Point<T>]> {
        let points = self.live();
        let newest = points.last()?.t;
        let at_or_before = count_before(points, newest - seconds, Edge::Inclusive);
        (at_or_before > 0).then(|| &points[at_or_before - 1..])
    }

    /// The points of the last `seconds`, however long the window has been watched.
    pub(crate) fn recent(&self, seconds: f64) -> &[Point<T>] {
        let points = self.live();
        let Some(newest) = points.last().map(|p| p.t) else {
            return &[];
        };
        let start = count_before(points, newest - seconds, Edge::Exclusive);
        &points[start..]
    }
}

/// Whether a point exactly at the edge counts as before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edge {
    Inclusive,
    Exclusive,
}

/// How many of `points` (time-ordered) lie before `edge`: `partition_point` on their time,
/// found by galloping from the end nearer to `edge` in time rather than by halving from the
/// middle. Why: a process's window spans several pages (120 points of about 100 bytes), and
/// each tick asks every window for an edge near one of its ends (where to drop old points, the
/// newest 2 s); halving reads a point on most of its pages, and after a second asleep each page
/// first touched is dear. At 1,000 GPU processes the halving in `push` was the hottest spot of
/// the rules, stalled on those reads.
fn count_before<T>(points: &[Point<T>], edge: f64, at_edge: Edge) -> usize {
    let before = |p: &Point<T>| match at_edge {
        Edge::Inclusive => p.t <= edge,
        Edge::Exclusive => p.t < edge,
    };
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return 0;
    };
    if edge - first.t <= last.t - edge {
        gallop_from_front(points, before)
    } else {
        gallop_from_back(points, before)
    }
}

/// `partition_point(before)`, probing 1, 2, 4... points from the front before halving.
fn gallop_from_front<T>(points: &[Point<T>], before: impl Fn(&Point<T>) -> bool) -> usize {
    // Every point before `low` is before the edge.
    let mut low = 0;
    let mut step = 1;
    loop {
        let probe = low + step;
        if probe > points.len() {
            return low + points[low..].partition_point(&before);
        }
        if !before(&points[probe - 1]) {
            return low + points[low..probe - 1].partition_point(&before);
        }
        low = probe;
        step *= 2;
    }
}

/// `partition_point(before)`, probing 1, 2, 4... points from the back before halving.
fn gallop_from_back<T>(points: &[Point<T>], before: impl Fn(&Point<T>) -> bool) -> usize {
    // No point from `high` on is before the edge.
    let mut high = points.len();
    let mut step = 1;
    loop {
        if step > high {
            return points[..high].partition_point(&before);
        }
        let probe = high - step;
        if before(&points[probe]) {
            return probe + 1 + points[probe + 1..high].partition_point(&before);
        }
        high = probe;
        step *= 2;
    }
}

/// A window that belongs to one process: cleared when the pid is reused by another process.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tracked<T> {
    start_ticks: Option<u64>,
    pub(crate) window: Window<T>,
    /// The engine's count of the last sample that had this key, so that a key seen twice in
    /// one sample is recorded once and one not seen is dropped (without a set of keys built
    /// per sample).
    pub(super) seen: u64,
}

impl<T> Tracked<T> {
    /// The newest point, when it is of the process that started at `start_ticks` (a point of
    /// a process whose pid was reused since is no one's "before").
    pub(super) fn latest_of(&self, start_ticks: Option<u64>) -> Option<&Point<T>> {
        let reused =
            matches!((self.start_ticks, start_ticks), (Some(old), Some(new)) if old != new);
        (!reused).then(|| self.window.latest()).flatten()
    }

    /// Records the first point of sample `sample`; later ones of the same sample are ignored.
    pub(super) fn push_once(
        &mut self,
        sample: u64,
        start_ticks: Option<u64>,
        t: f64,
        v: impl FnOnce() -> T,
        keep_seconds: f64,
    ) {
        if self.seen != sample {
            self.seen = sample;
            self.push(start_ticks, t, v(), keep_seconds);
        }
    }

    fn push(&mut self, start_ticks: Option<u64>, t: f64, v: T, keep_seconds: f64) {
        if let (Some(old), Some(new)) = (self.start_ticks, start_ticks) {
            if old != new {
                self.window = Window::default();
            }
        }
        self.start_ticks = start_ticks.or(self.start_ticks);
        self.window.push(t, v, keep_seconds);
    }
}

/// What the rules read of one GPU at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct GpuPoint {
    pub(crate) utilization_percent: Option<u32>,
    pub(crate) memory_used_bytes: Option<u64>,
    pub(crate) ecc_corrected: Option<u64>,
    pub(crate) ecc_uncorrected: Option<u64>,
    /// The clock-throttle reasons, a bit each ([`super::throttle::reason_bits`]).
    pub(crate) throttle: u8,
}

/// What the rules read of one (process, GPU) pair at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct ProcPoint {
    pub(crate) visible: bool,
    /// While the pid is missing from /proc: when it was last seen there, else (never seen) when
    /// it was first recorded missing. Carried from point to point, so it outlives the window:
    /// `zombie-memory`'s "missing for" read the window's span and never passed it.
    pub(crate) missing_since: Option<f64>,
    pub(crate) gpu_memory_bytes: Option<u64>,
    pub(crate) sm_percent: Option<u32>,
    /// The whole GPU's utilization, for processes NVML gives no SM figure for.
    pub(crate) gpu_utilization_percent: Option<u32>,
    pub(crate) cpu_percent: Option<f64>,
    pub(crate) children_count: Option<u32>,
    pub(crate) children_cpu_percent: Option<f64>,
    pub(crate) host_cpu_percent: Option<f64>,
}

/// What the rules read of one process's allocator on one torch device at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct AllocPoint {
    pub(crate) allocated_bytes: Option<u64>,
    pub(crate) reserved_bytes: Option<u64>,
    pub(crate) inactive_split_bytes: Option<u64>,
    pub(crate) alloc_retries: Option<u64>,
    pub(crate) ooms: Option<u64>,
}

/// What the rules read of the host at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct HostPoint {
    pub(crate) swap_used_bytes: Option<u64>,
    pub(crate) memory_available_bytes: Option<u64>,
    pub(crate) memory_total_bytes: Option<u64>,
}

/// Everything a rule may read: the current snapshot, the windows, and what the last evaluation
/// held. Read-only.
pub(crate) struct Inputs<'a> {
    pub(crate) snapshot: &'a Snapshot,
    pub(crate) held: super::Held<'a>,
    pub(crate) gpus: &'a BTreeMap<u32, Window<GpuPoint>>,
    /// Keyed by (pid, NVML GPU index).
    pub(crate) processes: &'a BTreeMap<(u32, u32), Tracked<ProcPoint>>,
    /// Keyed by (pid, torch device index).
    pub(crate) allocators: &'a BTreeMap<(u32, u32), Tracked<AllocPoint>>,
    pub(crate) host: &'a Window<HostPoint>,
    /// Keyed by pid: the step counters of the processes with an agent.
    pub(crate) steps: &'a BTreeMap<u32, StepTrack>,
    /// The jobs seen, with the ranks that have left them.
    pub(crate) ranks: &'a super::rank_gone::Memory,
    /// The snapshot's jobs by their ranks' pids.
    pub(crate) job_index: &'a JobIndex,
    /// The snapshot's process rows by pid.
    pub(crate) pid_index: &'a PidIndex,
}

impl<'a> Inputs<'a> {
    /// The job `pid` is a rank of.
    pub(crate) fn job_of(&self, pid: u32) -> Option<&'a Job> {
        (self.job_index.of(pid)).and_then(|at| self.snapshot.jobs.get(at))
    }

    /// The rows of `pid` in the current snapshot, first row first.
    pub(crate) fn rows_of(&self, pid: u32) -> impl Iterator<Item = &'a GpuProcess> + 'a {
        let processes = &self.snapshot.processes;
        (self.pid_index.rows(pid)).filter_map(move |row| processes.get(row))
    }
}

impl Inputs<'_> {
    /// The first process row of a pid in the current snapshot.
    pub(crate) fn process(&self, pid: u32) -> Option<&GpuProcess> {
        self.rows_of(pid).next()
    }
}

/// Each tracked window with its (pid, GPU or torch device) key and the points spanning at least
/// the last `seconds`; windows not watched that long yet are left out.
pub(crate) fn covering<T>(
    tracked: &BTreeMap<(u32, u32), Tracked<T>>,
    seconds: f64,
) -> impl Iterator<Item = ((u32, u32), &[Point<T>])> {
    tracked
        .iter()
        .filter_map(move |(&key, t)| Some((key, t.window.covering(seconds)?)))
}

/// How much a counter rose between the first and last known values of `points`, ignoring
/// resets (a driver reload or a restarted agent counts from zero again): the sum of the rises
/// between consecutive known values, and the latest value.
pub(crate) fn counter_rise<T>(
    points: &[Point<T>],
    value: impl Fn(&T) -> Option<u64>,
) -> Option<(u64, u64)> {
    let mut known = points.iter().filter_map(|p| value(&p.v));
    let mut previous = known.next()?;
    let mut rise = 0u64;
    for current in known {
        rise = rise.saturating_add(current.saturating_sub(previous));
        previous = current;
    }
    Some((rise, previous))
}

/// The mean of the known values.
pub(crate) fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, count) = values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (count > 0).then(|| sum / count as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(times: &[f64]) -> Vec<Point<()>> {
        times.iter().map(|&t| Point { t, v: () }).collect()
    }

    #[test]
    fn galloping_finds_what_halving_finds_for_every_edge_and_length() {
        for len in 0..70 {
            // Times with repeats and gaps, as a window holds after a clock step or a pause.
            let times: Vec<f64> = (0..len).map(|i| f64::from(i / 3 * 2 + i % 3)).collect();
            let points = series(&times);
            let mut edges: Vec<f64> = times
                .iter()
                .flat_map(|t| [*t - 0.5, *t, *t + 0.5])
                .collect();
            edges.extend([-1e9, 1e9, f64::NAN]);
            for edge in edges {
                for at_edge in [Edge::Inclusive, Edge::Exclusive] {
                    let expected = points.partition_point(|p| match at_edge {
                        Edge::Inclusive => p.t <= edge,
                        Edge::Exclusive => p.t < edge,
                    });
                    let found = count_before(&points, edge, at_edge);
                    assert_eq!(found, expected, "{len} points, edge {edge}, {at_edge:?}");
                }
                let before = |p: &Point<()>| p.t <= edge;
                let halving = points.partition_point(before);
                assert_eq!(gallop_from_front(&points, before), halving, "{len}, {edge}");
                assert_eq!(gallop_from_back(&points, before), halving, "{len}, {edge}");
            }
        }
    }

    #[test]
    fn an_edge_near_one_end_is_found_by_reading_near_that_end() {
        let points = series(&(0..120).map(f64::from).collect::<Vec<_>>());
        let oldest_read = std::cell::Cell::new(usize::MAX);
        let found = gallop_from_back(&points, |p| {
            oldest_read.set(oldest_read.get().min(p.t as usize));
            p.t < 117.0
        });
        assert_eq!(found, 117);
        assert!(
            oldest_read.get() >= 110,
            "read back to {}",
            oldest_read.get()
        );
        let newest_read = std::cell::Cell::new(0);
        let found = gallop_from_front(&points, |p| {
            newest_read.set(newest_read.get().max(p.t as usize));
            p.t <= 3.0
        });
        assert_eq!(found, 4);
        assert!(newest_read.get() <= 8, "read up to {}", newest_read.get());
    }

    /// A review: a reused pid's first point took the old process's point as its "before"
    /// (zombie-memory's "missing for" counted from when the old one was last seen).
    #[test]
    fn a_reused_pids_process_has_no_point_before_it() {
        let mut tracked: Tracked<u32> = Tracked::default();
        tracked.push_once(1, Some(100), 1.0, || 7, 60.0);
        assert_eq!(tracked.latest_of(Some(100)).map(|p| p.v), Some(7));
        assert_eq!(
            tracked.latest_of(None).map(|p| p.v),
            Some(7),
            "start unknown"
        );
        assert!(tracked.latest_of(Some(200)).is_none(), "another process");
    }

    /// The README's table of what torchtop keeps gives these sizes: a review's new field
    /// (zombie-memory's missing-since) grew the process point from 104 to 120 bytes.
    #[test]
    fn points_are_the_size_the_readme_gives() {
        use std::mem::size_of;
        assert_eq!(size_of::<Point<GpuPoint>>(), 72);
        assert_eq!(size_of::<Point<ProcPoint>>(), 120);
        assert_eq!(size_of::<Point<AllocPoint>>(), 88);
    }
}
