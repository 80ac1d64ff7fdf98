//! The top line: program, host, driver and CUDA versions, GPU count, refresh delay and time
//! (local time, as `TZ` says, or UTC under `--utc`).

use std::fmt::Write as _;

use super::label::Label;
use super::scratch::Scratch;
use ratatui::{
    layout::{Alignment, Rect},
    style::Style,
    Frame,
};

use crate::app::App;
use crate::format::{self, escape, NA};
use crate::model::Snapshot;
use crate::terminal::theme::Theme;

pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App, theme: Theme) {
    let snapshot = &app.snapshot;
    let mut scratch = super::scratch::take();
    let Scratch {
        runs: line,
        text: clock_text,
        ..
    } = &mut *scratch;
    clock_text.clear();
    write_clock(clock_text, snapshot, app.utc);
    let clock_text = &*clock_text;
    let badge = app
        .badge
        .as_deref()
        .map(|b| format!(" {} ", format::escape(b)));
    let badge_width = badge.as_ref().map_or(0, |b| b.chars().count() as u16);
    let width = clock_text.len() as u16 + badge_width;
    let room = usize::from(area.width.saturating_sub(width));
    line.clear();
    line.push(theme.brand(), "torchtop");
    let mut used = "torchtop".len();
    // Each field shown only where it fits, in order: a later, shorter one may still fit.
    let mut field = |write: &dyn Fn(&mut String)| {
        line.push_if_fits("  ", theme.plain(), write, |n| {
            let fits = used + 2 + n <= room;
            if fits {
                used += 2 + n;
            }
            fits
        })
    };
    let driver = &snapshot.driver;
    field(&|t| t.push_str(&escape(snapshot.host.hostname.as_deref().unwrap_or(NA))));
    field(&|t| {
        let version = escape(driver.driver_version.as_deref().unwrap_or(NA));
        let _ = write!(t, "driver {version}");
    });
    field(&|t| {
        let version = escape(driver.cuda_version.as_deref().unwrap_or(NA));
        let _ = write!(t, "CUDA {version}");
    });
    field(&|t| {
        let _ = match (driver.nvml_loaded, driver.gpu_count) {
            (true, Some(n)) => write!(t, "{n} GPU{}", if n == 1 { "" } else { "s" }),
            (true, None) => write!(t, "{} GPUs", snapshot.gpus.len()),
            // Before the first sample nothing is known of the library yet (the first one
            // waits up to 0.5 s for the agents it found).
            (false, _) if snapshot.time.is_empty() => write!(t, "GPUs {NA}"),
            (false, _) => write!(t, "no NVML"),
        };
    });
    field(&|t| {
        let every = if area.width >= 100 { "every " } else { "" };
        let _ = write!(t, "{every}{:.1}s", app.delay_seconds);
    });
    if let Some(hidden) = snapshot.hidden_host_pids() {
        // The note says why rows have no details: a shorter form before none at all.
        let _ = [Note::Long, Note::Short, Note::Shortest]
            .into_iter()
            .any(|form| field(&|t| t.push_str(&container_note(hidden, form))));
    }
    line.end_line(Style::new());
    frame.render_widget(&*line, area);
    if let Some(badge) = badge {
        let badge_area = Rect::new(
            area.right().saturating_sub(width),
            area.y,
            badge_width.min(area.width),
            1,
        );
        frame.render_widget(Label::new(badge).style(theme.readonly_badge()), badge_area);
    }
    let clock_width = width - badge_width;
    let clock_area = Rect::new(
        area.right().saturating_sub(clock_width),
        area.y,
        clock_width.min(area.width),
        1,
    );
    line.clear();
    line.push(Style::new(), clock_text);
    line.end_line(Style::new());
    let buf = frame.buffer_mut();
    line.render_aligned(clock_area, buf, theme.label(), Alignment::Right);
}

/// The forms of the container note, longest first.
#[derive(Clone, Copy)]
enum Note {
    Long,
    Short,
    Shortest,
}

fn container_note(n: usize, form: Note) -> String {
    let es = if n == 1 { "" } else { "es" };
    match form {
        Note::Long => format!(
            "inside a container: no details for {n} GPU process{es} (host pids; --pid=host \
             shows them)"
        ),
        Note::Short => format!("in a container: {n} GPU process{es} without details"),
        Note::Shortest => format!("{n} host pid{}", if n == 1 { "" } else { "s" }),
    }
}

/// " 12:34:56 UTC" under `--utc`, else the local time and zone (" 14:34:56 CEST") as `TZ`
/// or the system's zone says; nothing before the first sample. Written at the end of `out`.
fn write_clock(out: &mut String, snapshot: &Snapshot, utc: bool) {
    if snapshot.time.is_empty() {
        return;
    }
    let Ok(instant) = jiff::Timestamp::from_second(snapshot.unix_seconds.floor() as i64) else {
        return;
    };
    let zoned = instant.to_zoned(crate::format::clock::zone(utc));
    let info = zoned.time_zone().to_offset_info(instant);
    // As strftime's "%H:%M:%S" writes it, without parsing a format each frame.
    let (hour, minute, second) = (zoned.hour(), zoned.minute(), zoned.second());
    let name = escape(info.abbreviation());
    let _ = write!(out, " {hour:02}:{minute:02}:{second:02} {name}");
}

#[cfg(test)]
fn clock_text(snapshot: &Snapshot, utc: bool) -> String {
    let mut out = String::new();
    write_clock(&mut out, snapshot, utc);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_container_note_counts_the_pids_this_proc_lacks() {
        let process = |pid: u32, visible: bool| {
            let mut p = crate::model::GpuProcess::new(pid, 0, crate::model::ProcessKind::Compute);
            p.visible = visible;
            p
        };
        let mut snapshot = Snapshot {
            processes: vec![process(10, false), process(10, false), process(11, true)],
            ..Snapshot::default()
        };
        assert_eq!(snapshot.hidden_host_pids(), None, "not in a container");
        // A review: a container sharing the host's PID namespace (`--pid=host`) said "host
        // pids" of processes this /proc does not show, when they had ended.
        snapshot.host.container = Some("docker".into());
        assert_eq!(snapshot.hidden_host_pids(), None, "--pid=host");
        snapshot.host.pids_foreign = true;
        assert_eq!(snapshot.hidden_host_pids(), Some(1));
        assert_eq!(
            container_note(1, Note::Long),
            "inside a container: no details for 1 GPU process (host pids; --pid=host shows them)"
        );
        snapshot.processes[2].visible = false;
        assert!(
            container_note(snapshot.hidden_host_pids().unwrap(), Note::Long)
                .contains(" 2 GPU processes ")
        );
        snapshot.processes.iter_mut().for_each(|p| p.visible = true);
        assert_eq!(snapshot.hidden_host_pids(), None, "every GPU process found");
    }

    #[test]
    fn utc_and_a_fixed_zone() {
        let snapshot = Snapshot {
            time: "2025-06-01T12:34:56Z".to_string(),
            unix_seconds: 1_748_781_296.0,
            ..Default::default()
        };
        assert_eq!(clock_text(&snapshot, true), " 12:34:56 UTC");
        assert_eq!(clock_text(&Snapshot::default(), true), "");
    }
}
