//! `torchtop replay FILE --summary`: what happened, in a few lines: the span, each GPU's and
//! each process's peaks, every warning with its first and last time, the OOMs, the GPU state
//! changes, and the processes that came and went.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jiff::tz::TimeZone;

use crate::format::clock::{clock, rfc3339, zone_name};
use crate::format::{bytes, escape};
use crate::model::{OomReport, Severity, Snapshot, Subject, NO_GPU};
use crate::record::marks;
use crate::record::reader::Cursor;
use crate::record::{RecordError, Recording};

/// The most lines one section prints; the rest is counted.
const MAX_LINES: usize = 200;

/// A peak: the value and when it was reached.
#[derive(Debug, Clone, Copy, Default)]
struct Peak {
    value: f64,
    at: f64,
    seen: bool,
}

impl Peak {
    fn offer(&mut self, value: Option<f64>, at: f64) {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            if !self.seen || value > self.value {
                *self = Peak {
                    value,
                    at,
                    seen: true,
                };
            }
        }
    }
}

#[derive(Default)]
struct GpuPeaks {
    name: String,
    total: Option<u64>,
    utilization: Peak,
    memory: Peak,
    temperature: Peak,
    power: Peak,
}

struct ProcessSeen {
    command: String,
    gpus: Vec<u32>,
    rank: Option<u32>,
    first: f64,
    /// The first frame it was on a GPU, where NVML listed it (not its agent alone).
    first_on_gpu: Option<f64>,
    /// When it started (the frame's time less its running time), where the frame knew.
    started: Option<f64>,
    last: f64,
    /// The first frame it was missing from after it was last seen, as the TUI's event says.
    went: Option<f64>,
    memory: Peak,
    reserved: Peak,
    allocated: Peak,
}

struct WarningSeen {
    severity: Severity,
    first: f64,
    last: f64,
    frames: u64,
    message: String,
}

#[derive(Default)]
struct Tally {
    first: Option<f64>,
    last: f64,
    frames: u64,
    skipped: Vec<String>,
    gpus: BTreeMap<u32, GpuPeaks>,
    processes: BTreeMap<u32, ProcessSeen>,
    warnings: BTreeMap<(String, String, Severity), WarningSeen>,
    /// OOMs and state changes: when, and what.
    events: Vec<(f64, String)>,
    /// The OOM reports from before the first frame listed so far: (uid, pid, time's bits);
    /// the first [`MAX_EARLIER_OOMS`], and the most that one frame held beyond them (a frame
    /// repeats its reports, and those not listed are not remembered).
    earlier_ooms: Vec<(Option<u32>, u32, u64)>,
    earlier_ooms_more: u64,
    /// The recording's interval, to tell a gap from a late frame.
    interval: f64,
    /// Stretches with no frame (a full disk, a suspended machine): from, to; the first
    /// [`MAX_GAPS`] of them, and how many in all.
    gaps: Vec<(f64, f64)>,
    gap_count: u64,
}

/// The gaps the summary lists one by one; past them it counts.
const MAX_GAPS: usize = 50;

/// The OOMs from before the first frame the summary lists; past them it counts.
const MAX_EARLIER_OOMS: usize = 32;

fn subject(subject: &Subject) -> String {
    match subject {
        Subject::Gpu { index } => format!("GPU {index}"),
        Subject::Process { pid } => format!("pid {pid}"),
        Subject::Job { id } => escape(id).into_owned(),
        Subject::Host => "host".into(),
    }
}

impl Tally {
    fn add(&mut self, before: Option<&Snapshot>, now: &Snapshot) {
        let t = now.unix_seconds;
        if self.first.is_some() && super::time::is_gap(t - self.last, self.interval) {
            self.gap_count += 1;
            if self.gaps.len() < MAX_GAPS {
                self.gaps.push((self.last, t));
            }
        }
        self.first.get_or_insert(t);
        self.last = t;
        self.frames += 1;
        for gpu in &now.gpus {
            let peaks = self.gpus.entry(gpu.index).or_default();
            if let Some(name) = &gpu.name {
                peaks.name = escape(name).into_owned();
            }
            peaks.total = gpu.memory_total_bytes.or(peaks.total);
            peaks
                .utilization
                .offer(gpu.utilization_percent.map(f64::from), t);
            peaks
                .memory
                .offer(gpu.memory_used_bytes.map(|b| b as f64), t);
            peaks.temperature.offer(gpu.temperature_c.map(f64::from), t);
            peaks.power.offer(gpu.power_w, t);
        }
        for process in &now.processes {
            let seen = self
                .processes
                .entry(process.pid)
                .or_insert_with(|| ProcessSeen {
                    command: escape(process.command.as_deref().unwrap_or("?")).into_owned(),
                    gpus: Vec::new(),
                    rank: None,
                    first: t,
                    first_on_gpu: None,
                    started: process.running_seconds.map(|running| t - running),
                    last: t,
                    went: None,
                    memory: Peak::default(),
                    reserved: Peak::default(),
                    allocated: Peak::default(),
                });
            seen.last = t;
            if process.gpu != NO_GPU {
                seen.first_on_gpu.get_or_insert(t);
            }
            if !seen.gpus.contains(&process.gpu) {
                seen.gpus.push(process.gpu);
            }
            seen.memory
                .offer(process.gpu_memory_bytes.map(|b| b as f64), t);
            if let Some(torch) = &process.torch {
                seen.rank = torch.rank.or(seen.rank);
                for device in &torch.devices {
                    seen.reserved
                        .offer(device.reserved_bytes.map(|b| b as f64), t);
                    seen.allocated
                        .offer(device.allocated_bytes.map(|b| b as f64), t);
                }
            }
        }
        for seen in self.processes.values_mut() {
            if seen.last < t && seen.went.is_none_or(|went| went < seen.last) {
                seen.went = Some(t);
            }
        }
        for warning in &now.warnings {
            let key = (
                warning.id.clone(),
                subject(&warning.subject),
                warning.severity,
            );
            let seen = self.warnings.entry(key).or_insert_with(|| WarningSeen {
                severity: warning.severity,
                first: t,
                last: t,
                frames: 0,
                message: escape(&warning.message).into_owned(),
            });
            seen.last = t;
            seen.frames += 1;
        }
        self.add_earlier_ooms(now, t);
        if let Some(before) = before {
            let mask = marks::OOM | marks::GPU_STATE;
            if marks::marks(Some(before), now) & mask != 0 {
                for sentence in marks::describe(before, now) {
                    if sentence.starts_with("out of memory") || sentence.starts_with("GPU ") {
                        self.events.push((t, sentence));
                    }
                }
            }
        }
    }

    /// An OOM before the first frame shows in no rise of a counter between frames, and its
    /// report may come a frame or two late (the agent repeats it to a new monitor).
    fn add_earlier_ooms(&mut self, now: &Snapshot, t: f64) {
        let first = self.first.unwrap_or(t);
        let mut unlisted = 0;
        for report in now.ooms.iter().filter(|r| r.unix_seconds < first) {
            let key = (report.uid, report.pid, report.unix_seconds.to_bits());
            if self.earlier_ooms.contains(&key) {
                continue;
            }
            // A monitor keeps 32 reports; a crafted file could hold any number.
            if self.earlier_ooms.len() == MAX_EARLIER_OOMS {
                unlisted += 1;
                continue;
            }
            self.earlier_ooms.push(key);
            self.events.push((report.unix_seconds, earlier_oom(report)));
        }
        self.earlier_ooms_more = self.earlier_ooms_more.max(unlisted);
    }
}

/// An OOM that its agent reported before the recording's first frame.
fn earlier_oom(report: &OomReport) -> String {
    let mut sentence = format!("out of memory before the first frame: pid {}", report.pid);
    if let Some(command) = &report.command {
        let _ = write!(sentence, " ({})", escape(command));
    }
    if let Some(device) = report.device {
        let _ = write!(sentence, " on cuda:{device}");
    }
    if let Some(asked) = report.requested_bytes {
        let _ = write!(sentence, " asking for {}", bytes(asked));
    }
    if let Some(free) = report.device_free_bytes {
        let _ = write!(sentence, " with {} free", bytes(free));
    }
    if let Some(path) = &report.snapshot_path {
        let _ = write!(sentence, "; snapshot: {}", escape(path));
    }
    sentence
}

/// Reads the frames of `range` and writes the summary, its times in `zone`.
pub(crate) fn summary(
    recording: &mut Recording,
    range: std::ops::Range<usize>,
    zone: &TimeZone,
) -> Result<String, RecordError> {
    let mut tally = Tally {
        interval: recording.meta.interval_seconds,
        ..Tally::default()
    };
    let mut cursor = Cursor::default();
    let mut before: Option<Snapshot> = None;
    for i in range {
        match recording.snapshot(&mut cursor, i) {
            Ok(now) => {
                tally.add(before.as_ref(), &now);
                before = Some(now);
            }
            Err(error) => {
                tally.skipped.push(error.0);
                before = None;
            }
        }
    }
    Ok(render(recording, &tally, zone))
}

/// "it runs from 17:58:06 to 18:02:07 UTC", for a range that holds no frame.
pub(crate) fn span_sentence(recording: &Recording, zone: &TimeZone) -> String {
    match (recording.frames().first(), recording.frames().last()) {
        (Some(a), Some(b)) => format!(
            "it runs from {} to {} {}",
            clock(a.time, zone),
            clock(b.time, zone),
            zone_name(b.time, zone)
        ),
        _ => "it holds no frame".to_string(),
    }
}

fn render(recording: &Recording, tally: &Tally, zone: &TimeZone) -> String {
    let mut out = String::new();
    let meta = &recording.meta;
    let _ = writeln!(
        out,
        "{}: recorded on {} by torchtop {}, every {:.1} s",
        recording.name(),
        escape(meta.host.as_deref().unwrap_or("an unnamed host")),
        escape(&meta.torchtop),
        meta.interval_seconds
    );
    let Some(first) = tally.first else {
        let _ = writeln!(
            out,
            "no frame in that range; {}",
            span_sentence(recording, zone)
        );
        // Why, when frames were there and could not be read.
        write_notes(&mut out, recording, tally);
        return out;
    };
    // Frames are taken a little under or over a second apart: the length is rounded, not cut.
    let _ = writeln!(
        out,
        "from {} to {} ({}, {}); times below are {}",
        rfc3339(first, zone),
        rfc3339(tally.last, zone),
        crate::format::duration((tally.last - first).round()),
        frames(tally.frames),
        zone_name(first, zone)
    );
    write_notes(&mut out, recording, tally);
    render_peaks(&mut out, tally, zone);
    render_warnings(&mut out, tally, zone);
    let mut events: Vec<String> = tally
        .events
        .iter()
        .map(|(t, sentence)| {
            // Before the recording: maybe another day.
            let when = if *t < first {
                rfc3339(*t, zone)
            } else {
                clock(*t, zone)
            };
            format!("  {when}  {sentence}")
        })
        .collect();
    if tally.earlier_ooms_more > 0 {
        events.push(format!(
            "  and at least {} more OOM reports from before the first frame",
            tally.earlier_ooms_more
        ));
    }
    section(&mut out, "OOMs and GPU state changes", &events);
    render_gaps(&mut out, tally, zone);
    render_came_and_went(&mut out, tally, zone);
    out
}

/// The recording's issues and the frames that could not be read, one "note:" line each.
fn write_notes(out: &mut String, recording: &Recording, tally: &Tally) {
    write_issues(out, recording.issues.iter().chain(&tally.skipped));
}

/// Escaped: a frame's decoding error quotes what the file says ("unknown variant `...`"), and
/// a recording is anyone's to craft.
fn write_issues<'a>(out: &mut String, issues: impl Iterator<Item = &'a String>) {
    for issue in issues {
        let _ = writeln!(out, "note: {}", escape(issue));
    }
}

/// "05:28:12 to 05:28:30 (0:18): no frame": what an incident review must not read past.
fn render_gaps(out: &mut String, tally: &Tally, zone: &TimeZone) {
    let mut lines: Vec<String> = (tally.gaps.iter())
        .map(|&(from, to)| {
            format!(
                "  {} to {} ({}): no frame",
                clock(from, zone),
                clock(to, zone),
                crate::format::duration((to - from).round())
            )
        })
        .collect();
    let more = tally.gap_count.saturating_sub(tally.gaps.len() as u64);
    if more > 0 {
        lines.push(format!("  and {more} more"));
    }
    section(out, "Gaps in the recording", &lines);
}

fn at(peak: &Peak, zone: &TimeZone, show: impl Fn(f64) -> String) -> String {
    if peak.seen {
        format!("{} at {}", show(peak.value), clock(peak.at, zone))
    } else {
        "N/A".into()
    }
}

fn render_peaks(out: &mut String, tally: &Tally, zone: &TimeZone) {
    let mut lines = Vec::new();
    for (index, gpu) in &tally.gpus {
        let total = gpu
            .total
            .map(|t| format!(" of {}", bytes(t)))
            .unwrap_or_default();
        lines.push(format!(
            "  GPU {index} {}: utilization {}, memory {}, temperature {}, power {}",
            gpu.name,
            at(&gpu.utilization, zone, |v| format!("{v:.0}%")),
            at(&gpu.memory, zone, |v| format!("{}{total}", bytes(v as u64))),
            at(&gpu.temperature, zone, |v| format!("{v:.0}C")),
            at(&gpu.power, zone, |v| format!("{v:.0}W")),
        ));
    }
    for (pid, p) in &tally.processes {
        let rank = p.rank.map(|r| format!(", rank {r}")).unwrap_or_default();
        let mut line = format!(
            "  pid {pid} {} ({}{rank}): GPU memory {}",
            p.command,
            held(&p.gpus),
            at(&p.memory, zone, |v| bytes(v as u64))
        );
        if p.reserved.seen {
            let _ = write!(
                line,
                "; allocator reserved {}, allocated {}",
                at(&p.reserved, zone, |v| bytes(v as u64)),
                at(&p.allocated, zone, |v| bytes(v as u64))
            );
        }
        lines.push(line);
    }
    section(out, "Peaks", &lines);
}

fn render_warnings(out: &mut String, tally: &Tally, zone: &TimeZone) {
    let mut rows: Vec<(&(String, String, Severity), &WarningSeen)> =
        tally.warnings.iter().collect();
    rows.sort_by(|a, b| {
        b.1.severity
            .cmp(&a.1.severity)
            .then(a.1.first.total_cmp(&b.1.first))
    });
    let lines: Vec<String> = rows
        .into_iter()
        .map(|((id, subject, _), w)| {
            format!(
                "  {:<8} {id} ({subject}): first {}, last {} ({}): {}",
                format!("{:?}", w.severity).to_lowercase(),
                clock(w.first, zone),
                clock(w.last, zone),
                frames(w.frames),
                w.message
            )
        })
        .collect();
    section(out, "Warnings", &lines);
}

/// "1 frame", "2 frames".
fn frames(n: u64) -> String {
    if n == 1 {
        "1 frame".to_string()
    } else {
        format!("{n} frames")
    }
}

/// When a process came, if after `first` (the range's first frame): the first frame it was in,
/// as the TUI's event says. But a process that had started before `first` and joined the frames
/// through its agent alone was there all along (its agent answers a second or so into the
/// recording): it came when NVML first listed it on a GPU, if it ever did. A process that ran
/// before the recording and opened CUDA during it came then, as the TUI's event says.
fn came(p: &ProcessSeen, first: f64) -> Option<f64> {
    let already_running = p.started.is_some_and(|started| started < first);
    let through_agent = p.first_on_gpu != Some(p.first);
    let came = if already_running && through_agent {
        p.first_on_gpu?
    } else {
        p.first
    };
    (came > first).then_some(came)
}

/// Came: see [`came`]; went: the first frame it was missing from after it was last seen, the
/// frame whose event the TUI shows.
fn render_came_and_went(out: &mut String, tally: &Tally, zone: &TimeZone) {
    let first = tally.first.unwrap_or_default();
    let mut lines = Vec::new();
    for (pid, p) in &tally.processes {
        let what = format!("pid {pid} {} ({})", p.command, held(&p.gpus));
        if let Some(came) = came(p, first) {
            lines.push((came, format!("  came {}  {what}", clock(came, zone))));
        }
        if let Some(went) = p.went.filter(|&went| went > p.last) {
            lines.push((went, format!("  went {}  {what}", clock(went, zone))));
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    let lines: Vec<String> = lines.into_iter().map(|(_, l)| l).collect();
    section(out, "Processes that came and went", &lines);
}

/// The GPUs a process held, as "GPU 0,3"; an agent's process that holds none says "no GPU".
fn held(values: &[u32]) -> String {
    let held: Vec<String> = values
        .iter()
        .filter(|&&gpu| gpu != NO_GPU)
        .map(u32::to_string)
        .collect();
    if held.is_empty() {
        "no GPU".to_string()
    } else {
        format!("GPU {}", held.join(","))
    }
}

fn section(out: &mut String, title: &str, lines: &[String]) {
    let _ = writeln!(out, "\n{title}");
    if lines.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for line in lines.iter().take(MAX_LINES) {
        let _ = writeln!(out, "{line}");
    }
    if lines.len() > MAX_LINES {
        let _ = writeln!(out, "  and {} more", lines.len() - MAX_LINES);
    }
}

#[cfg(test)]
mod tests {
    use super::{frames, held, render_came_and_went, render_gaps, write_issues, Tally};
    use crate::model::process::NO_GPU;
    use crate::model::{GpuProcess, ProcessKind, Snapshot};

    fn process(pid: u32, gpu: u32, running: f64) -> GpuProcess {
        GpuProcess {
            running_seconds: Some(running),
            ..GpuProcess::new(pid, gpu, ProcessKind::Compute)
        }
    }

    fn came_and_went(frames: &[Snapshot]) -> String {
        let mut tally = Tally::default();
        for (i, frame) in frames.iter().enumerate() {
            tally.add(i.checked_sub(1).map(|b| &frames[b]), frame);
        }
        let mut out = String::new();
        render_came_and_went(&mut out, &tally, &crate::format::clock::zone(true));
        out
    }

    fn at(t: f64, processes: Vec<GpuProcess>) -> Snapshot {
        Snapshot {
            unix_seconds: t,
            processes,
            ..Snapshot::default()
        }
    }

    /// A review: two agents' processes started 15 s before the recording were "came" in its
    /// second frame, the first their agents' figures reached (NVML did not list them).
    #[test]
    fn a_process_that_started_before_the_recording_did_not_come() {
        let out = came_and_went(&[
            at(1000.0, vec![process(10, 0, 500.0)]),
            at(
                1001.0,
                vec![
                    process(10, 0, 501.0),
                    process(20, NO_GPU, 16.0),
                    process(30, 0, 0.5),
                ],
            ),
        ]);
        assert!(out.contains("came 00:16:41  pid 30"), "{out}");
        assert!(!out.contains("pid 20") && !out.contains("pid 10"), "{out}");
    }

    /// A review: a job that started before the recording and opened CUDA 25 s into it was
    /// "appeared" in the TUI's events but had no "came" in the summary.
    #[test]
    fn a_process_that_started_before_the_recording_came_onto_a_gpu_during_it() {
        let out = came_and_went(&[
            at(1000.0, vec![]),
            at(1001.0, vec![process(20, NO_GPU, 16.0)]),
            at(1025.0, vec![process(20, 2, 40.0), process(40, 3, 300.0)]),
        ]);
        assert!(out.contains("came 00:17:05  pid 40 ? (GPU 3)"), "{out}");
        assert!(out.contains("came 00:17:05  pid 20 ? (GPU 2)"), "{out}");
        assert!(!out.contains("00:16:41"), "{out}");
    }

    #[test]
    fn one_frame_is_not_1_frames() {
        assert_eq!(frames(1), "1 frame");
        assert_eq!(frames(2), "2 frames");
    }

    #[test]
    fn an_agent_without_a_gpu_is_not_gpu_4294967295() {
        assert_eq!(held(&[0, 3]), "GPU 0,3");
        assert_eq!(held(&[NO_GPU]), "no GPU");
        assert_eq!(held(&[NO_GPU, 2]), "GPU 2");
    }

    /// An ops review: a recording that paused 18 s for a full disk summed up as if it ran on.
    #[test]
    fn a_stretch_without_frames_is_named() {
        let mut tally = Tally {
            interval: 1.0,
            ..Tally::default()
        };
        let times = [0.0, 1.0, 2.1, 20.0, 21.0, 22.9];
        let frames: Vec<Snapshot> = times.iter().map(|&t| at(t, vec![])).collect();
        for (i, frame) in frames.iter().enumerate() {
            tally.add(i.checked_sub(1).map(|b| &frames[b]), frame);
        }
        let mut out = String::new();
        render_gaps(&mut out, &tally, &crate::format::clock::zone(true));
        assert!(
            out.contains("00:00:02 to 00:00:20 (0:18): no frame"),
            "{out}"
        );
        assert_eq!(
            out.matches("no frame").count(),
            1,
            "a late frame is no gap: {out}"
        );
    }

    /// A frame's decoding error quotes the file (record::de's
    /// `a_decoding_error_quotes_the_file`): a crafted value reached the terminal raw.
    #[test]
    fn a_frame_s_error_is_escaped() {
        let error =
            "a frame does not make a snapshot: unknown variant `\x1b]0;PWNED\x07`".to_string();
        let mut out = String::new();
        write_issues(&mut out, [error].iter());
        assert!(
            out.starts_with("note: ") && !out.contains('\x1b'),
            "{out:?}"
        );
    }

    /// A crafted recording whose frames each name new OOMs from before the first frame: the
    /// summary lists 32 and counts the rest, with the command escaped.
    #[test]
    fn the_ooms_from_before_the_first_frame_are_bounded_and_escaped() {
        let mut tally = Tally::default();
        let frames: Vec<Snapshot> = (0..5)
            .map(|f| Snapshot {
                ooms: (0..20)
                    .map(|i| crate::model::OomReport {
                        pid: f * 100 + i,
                        command: Some("python\x1b]0;PWNED\x07".into()),
                        unix_seconds: 10.0,
                        ..Default::default()
                    })
                    .collect(),
                ..at(1000.0 + f64::from(f), vec![])
            })
            .collect();
        for (i, frame) in frames.iter().enumerate() {
            tally.add(i.checked_sub(1).map(|b| &frames[b]), frame);
        }
        assert_eq!(tally.events.len(), 32);
        // Frames 3 to 5 each held 20 beyond the 32 listed.
        assert_eq!(tally.earlier_ooms_more, 20);
        assert!(
            tally.events.iter().all(|(_, e)| !e.contains('\x1b')),
            "{:?}",
            tally.events[0]
        );
    }
}
