//! The player: a thread that owns the recording and moves through it as the transport asks
//! (play at a speed, pause, step, seek, jump to the next event), sending each frame shown to
//! the UI. After any move that is not one frame forward, the history (the sparklines) is built
//! again from the frames before the one shown, so it is the history of that moment: from the
//! figures of those frames ([`super::figures`]), kept from one move to the next, so that a
//! step back reads one frame more rather than the whole span again.

use std::ops::Range;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::tz::TimeZone;
use tokio::sync::mpsc::UnboundedSender;

use super::figures::{Figures, FiguresCache};
use super::time::{self, Moment};
use crate::format::clock::clock;
use crate::model::{History, HostProcess, Snapshot};
use crate::record::marks;
use crate::record::reader::Cursor;
use crate::record::writer::KEY_EVERY;
use crate::record::Recording;

/// The speeds `+` and `-` step through.
pub(crate) const SPEEDS: [f64; 10] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// `--speed`: one of [`SPEEDS`]. Any number in the range was taken and then played at the next
/// step up (3 at 4x, 100 at 128x) without a word.
pub(crate) fn parse_speed(text: &str) -> Result<f64, String> {
    let shown = crate::format::escape(text);
    match text.trim().parse::<f64>() {
        Ok(speed) if SPEEDS.contains(&speed) => Ok(speed),
        Ok(_) => Err(format!(
            "the speed is one of 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64 and 128, not {shown}"
        )),
        Err(_) => Err(format!("'{shown}' is not a speed")),
    }
}

/// What the transport asks of the player.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Command {
    TogglePause,
    /// Pause and move by this many frames.
    Step(i64),
    Faster,
    Slower,
    /// Go to the frame within this moment, else the nearest (the first or last frame for a
    /// moment outside the recording).
    Seek(Moment),
    /// Pause at the next (`true`) or previous marked frame.
    Jump(bool),
}

/// Where the player stands, for the time bar.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Position {
    pub(crate) index: usize,
    pub(crate) count: usize,
    pub(crate) time: f64,
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) paused: bool,
    pub(crate) speed: f64,
    /// Times of the frames with marks (warnings, OOMs, state changes).
    pub(crate) events: Arc<Vec<f64>>,
}

/// One frame to show.
pub(crate) struct Update {
    /// `None` when only the position changed (pause, speed).
    pub(crate) snapshot: Option<Arc<Snapshot>>,
    /// The history up to (not including) this frame, when it had to be built again.
    pub(crate) history: Option<History>,
    pub(crate) position: Position,
    /// A sentence for the status line: what happened at an event, the end of the recording.
    pub(crate) note: Option<String>,
}

struct Player {
    recording: Recording,
    cursor: Cursor,
    /// The last host process table read (frame index, table), for frames that have none.
    table: Option<(usize, Arc<Vec<HostProcess>>)>,
    /// The frame shown last, and the history the UI has up to and with it.
    last: Option<(usize, Arc<Snapshot>)>,
    history: History,
    /// The figures of the frames the history was last built from, and near them.
    figures: FiguresCache,
    /// Where [`Figures::record`] puts the figures of a frame for the history to read.
    scratch: Snapshot,
    index: usize,
    paused: bool,
    speed: usize,
    events: Arc<Vec<f64>>,
    /// The zone of the times in its sentences, the screen's.
    zone: TimeZone,
    updates: UnboundedSender<Update>,
}

/// Starts the player on frame `start`; returns where to send commands.
pub(crate) fn spawn(
    recording: Recording,
    start: usize,
    speed: f64,
    zone: TimeZone,
    updates: UnboundedSender<Update>,
) -> std::io::Result<Sender<Command>> {
    let (commands_tx, commands) = std::sync::mpsc::channel();
    let player = Player::new(recording, start, speed, zone, updates);
    std::thread::Builder::new()
        .name("torchtop-replay".into())
        .spawn(move || player.run(commands))?;
    Ok(commands_tx)
}

impl Player {
    fn new(
        recording: Recording,
        start: usize,
        speed: f64,
        zone: TimeZone,
        updates: UnboundedSender<Update>,
    ) -> Player {
        let events = recording
            .frames()
            .iter()
            .filter(|f| f.marks & marks::EVENTS != 0)
            .map(|f| f.time)
            .collect();
        let speed = SPEEDS
            .iter()
            .position(|&s| s >= speed)
            .unwrap_or(SPEEDS.len() - 1);
        let history = History::for_interval(recording.meta.interval_seconds);
        Player {
            index: start.min(recording.frames().len().saturating_sub(1)),
            figures: FiguresCache::new(history.capacity()),
            scratch: Snapshot::default(),
            history,
            recording,
            cursor: Cursor::default(),
            table: None,
            last: None,
            paused: false,
            speed,
            events: Arc::new(events),
            zone,
            updates,
        }
    }

    fn count(&self) -> usize {
        self.recording.frames().len()
    }

    fn run(mut self, commands: Receiver<Command>) {
        if self.count() == 0 || !self.show(self.index, true, None) {
            return;
        }
        let mut shown_at = Instant::now();
        loop {
            let command = match self.wait() {
                None => commands.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(wait) => commands.recv_timeout(wait.saturating_sub(shown_at.elapsed())),
            };
            let alive = match command {
                Ok(command) => self.obey(command),
                Err(RecvTimeoutError::Timeout) => self.advance(),
                Err(RecvTimeoutError::Disconnected) => false,
            };
            if !alive {
                return;
            }
            shown_at = Instant::now();
        }
    }

    /// How long the current frame stays while playing; `None` while paused.
    fn wait(&self) -> Option<Duration> {
        if self.paused || self.index + 1 >= self.count() {
            return None;
        }
        let frames = self.recording.frames();
        let interval = self.recording.meta.interval_seconds.max(0.01);
        // A gap (torchtop was stopped, the machine slept) is played as a few intervals. The
        // reader refuses frame times and intervals no `Duration` holds; a gap that is still
        // no number of seconds plays as one interval rather than stopping the player.
        let gap =
            (frames[self.index + 1].time - frames[self.index].time).clamp(0.0, 5.0 * interval);
        let wait = Duration::try_from_secs_f64(gap / SPEEDS[self.speed]);
        Some(wait.unwrap_or(Duration::from_secs(1)))
    }

    fn advance(&mut self) -> bool {
        let next = self.index + 1;
        if next + 1 >= self.count() {
            self.paused = true;
            let note = format!(
                "end of the recording ({}): Left steps back, g seeks, [ jumps to the last event",
                clock(
                    self.recording.frames()[next.min(self.count() - 1)].time,
                    &self.zone
                )
            );
            return self.show(next.min(self.count() - 1), false, Some(note));
        }
        self.show(next, false, None)
    }

    fn obey(&mut self, command: Command) -> bool {
        match command {
            Command::TogglePause => {
                self.paused = !self.paused;
                let note = (!self.paused && self.index + 1 >= self.count()).then(|| {
                    "this is the end of the recording: Left steps back, g seeks".to_string()
                });
                self.send_position(note)
            }
            Command::Faster | Command::Slower => {
                self.speed = match command {
                    Command::Faster => (self.speed + 1).min(SPEEDS.len() - 1),
                    _ => self.speed.saturating_sub(1),
                };
                self.send_position(None)
            }
            Command::Step(by) => {
                self.paused = true;
                let target = (self.index as i64 + by).clamp(0, self.count() as i64 - 1) as usize;
                self.show(target, target != self.index + 1, None)
            }
            Command::Seek(moment) => {
                let note = self.seek_note(moment);
                self.show(
                    time::nearest(self.recording.frames(), moment),
                    true,
                    Some(note),
                )
            }
            Command::Jump(forward) => self.jump(forward),
        }
    }

    /// Where a seek lands; a moment outside the recording goes to its nearer end, as atop's
    /// `b` does, and says so.
    fn seek_note(&self, moment: Moment) -> String {
        let frames = self.recording.frames();
        let target = time::nearest(frames, moment);
        let at = clock(frames[target].time, &self.zone);
        let (first, last) = (frames[0].time, frames[frames.len() - 1].time);
        if !moment.reaches(first) {
            format!("that is before the recording starts: at its first frame, {at}")
        } else if moment.at > last {
            format!("that is after the recording ends: at its last frame, {at}")
        } else if let Some((a, b)) =
            time::gap_around(frames, moment, self.recording.meta.interval_seconds)
        {
            let (a, b) = (clock(a, &self.zone), clock(b, &self.zone));
            format!("at {at}, the nearest frame: nothing was recorded from {a} to {b}")
        } else {
            format!("at {at}")
        }
    }

    fn jump(&mut self, forward: bool) -> bool {
        let frames = self.recording.frames();
        let found = if forward {
            (self.index + 1..frames.len()).find(|&i| frames[i].marks & marks::EVENTS != 0)
        } else {
            (0..self.index)
                .rev()
                .find(|&i| frames[i].marks & marks::EVENTS != 0)
        };
        let Some(target) = found else {
            // The same events `]` stops at (marks::EVENTS): processes coming and going too.
            let note = if forward {
                "no new warning, OOM, GPU state change or process coming or going after this moment"
            } else {
                "no new warning, OOM, GPU state change or process coming or going before this moment"
            };
            return self.send_position(Some(note.to_string()));
        };
        self.paused = true;
        self.show(target, true, None)
    }

    /// Decodes and sends frame `index`; with `rebuild`, the history too. A frame that cannot be
    /// decoded is reported and the next one shown. Returns false when the UI is gone.
    fn show(&mut self, index: usize, rebuild: bool, note: Option<String>) -> bool {
        let mut index = index;
        let mut problem = None;
        let (snapshot, history, before) = loop {
            match self.decode(index, rebuild) {
                Ok(found) => break found,
                Err(error) => {
                    problem = Some(format!("{error}; skipped"));
                    if index + 1 >= self.count() {
                        return self.send_position(problem);
                    }
                    index += 1;
                }
            }
        };
        self.index = index;
        let event = before
            .filter(|_| self.recording.frames()[index].marks & marks::EVENTS != 0)
            .map(|before| marks::describe(&before, &snapshot))
            .filter(|sentences| !sentences.is_empty())
            .map(|sentences| {
                let at = clock(snapshot.unix_seconds, &self.zone);
                format!("{at}  {}", sentences.join("; "))
            });
        let note = problem.or(event).or(note);
        let snapshot = Arc::new(snapshot);
        self.last = Some((index, snapshot.clone()));
        let update = Update {
            snapshot: Some(snapshot),
            history,
            position: self.position(),
            note,
        };
        self.updates.send(update).is_ok()
    }

    /// The snapshot at `index`, the history before it (when the UI's must be replaced), and
    /// the frame before it when known. The player keeps a copy of the UI's history: one frame
    /// on is one more sample; a jump forward within the history's span adds the frames in
    /// between; anything else builds it again from the frames before `index`. The frames in
    /// between are recorded from their figures, kept or read, not from whole snapshots.
    fn decode(
        &mut self,
        index: usize,
        rebuild: bool,
    ) -> Result<(Snapshot, Option<History>, Option<Snapshot>), crate::record::RecordError> {
        self.recording.aim(index);
        let capacity = self.history.capacity();
        let last = self.last.as_ref().map(|(i, s)| (*i, s.clone()));
        let (from, mut before) = match last {
            Some((at, shown)) if at + 1 == index => (index, Some(shown.as_ref().clone())),
            Some((at, _)) if at < index && index - at < capacity => (at + 1, None),
            _ => {
                self.history = History::for_interval(self.recording.meta.interval_seconds);
                (index.saturating_sub(capacity.saturating_sub(1)), None)
            }
        };
        let span = index.saturating_sub(capacity.saturating_sub(1))..index;
        for i in from..index {
            if let Some(figures) = self.figures_of(i, &span) {
                figures.record(&mut self.history, &mut self.scratch);
            }
        }
        // What happened at an event is told against the frame before it.
        let marked = self.recording.frames()[index].marks & marks::EVENTS != 0;
        if before.is_none() && marked && index > 0 {
            before = self.recording.snapshot(&mut self.cursor, index - 1).ok();
        }
        let sent = (rebuild || from != index).then(|| self.history.clone());
        let mut snapshot = self.recording.snapshot(&mut self.cursor, index)?;
        self.fill_table(index, &mut snapshot);
        self.history.record(&snapshot);
        Ok((snapshot, sent, before))
    }

    /// The figures of frame `i`, kept or read; `None` when it cannot be read. Reading a frame
    /// decodes from a kept decoder state or key frame before it, so the figures of the frames
    /// on the way are read too, for a third more than decoding them: stepping back, they are
    /// the ones the far end of the history needs next, and the decoder states kept are those
    /// near the frame shown, not down there.
    fn figures_of(&mut self, i: usize, span: &Range<usize>) -> Option<Arc<Figures>> {
        if let Some(kept) = self.figures.get(i) {
            return kept;
        }
        let starts = self.recording.decoding_starts(&self.cursor, i);
        for on_the_way in starts.max(i.saturating_sub(KEY_EVERY as usize))..i {
            if !self.figures.contains(on_the_way) {
                let figures = self.read_figures(on_the_way);
                self.figures.insert(on_the_way, figures, span);
            }
        }
        let figures = self.read_figures(i);
        self.figures.insert(i, figures.clone(), span);
        figures
    }

    fn read_figures(&mut self, i: usize) -> Option<Arc<Figures>> {
        let mut figures: Figures = self.recording.read(&mut self.cursor, i).ok()?;
        figures.trim();
        Some(Arc::new(figures))
    }

    /// Gives a frame without the host process table the last one recorded before it, so the
    /// tree view shows the parents and workers as last seen.
    fn fill_table(&mut self, index: usize, snapshot: &mut Snapshot) {
        if !snapshot.host_processes.is_empty() {
            self.table = Some((index, Arc::new(snapshot.host_processes.clone())));
            return;
        }
        let frames = self.recording.frames();
        let Some(at) = (0..index)
            .rev()
            .find(|&i| frames[i].marks & marks::HOST_TABLE != 0)
        else {
            return;
        };
        if self.table.as_ref().is_none_or(|(i, _)| *i != at) {
            let mut cursor = Cursor::default();
            let Ok(found) = self.recording.snapshot(&mut cursor, at) else {
                return;
            };
            self.table = Some((at, Arc::new(found.host_processes)));
        }
        if let Some((_, table)) = &self.table {
            snapshot.host_processes.clone_from(table.as_ref());
        }
    }

    /// Tells the UI where the player stands, without a new frame.
    fn send_position(&self, note: Option<String>) -> bool {
        let update = Update {
            snapshot: None,
            history: None,
            position: self.position(),
            note,
        };
        self.updates.send(update).is_ok()
    }

    fn position(&self) -> Position {
        let frames = self.recording.frames();
        Position {
            index: self.index,
            count: frames.len(),
            time: frames.get(self.index).map_or(0.0, |f| f.time),
            start: frames.first().map_or(0.0, |f| f.time),
            end: frames.last().map_or(0.0, |f| f.time),
            paused: self.paused,
            speed: SPEEDS[self.speed],
            events: self.events.clone(),
        }
    }
}

#[cfg(test)]
#[path = "player_tests.rs"]
mod tests;
