//! A timing run of the player on a recording named by `TORCHTOP_REPLAY_TIMING_FILE`: how long
//! the player takes to answer `←`, `[`, a seek and `→`, from the command to the frame sent to
//! the UI (the screen's own drawing is not counted). It prints the figures and asserts nothing
//! about speed; it is ignored, and run by hand in release mode for the README's figures:
//!
//! ```sh
//! TORCHTOP_REPLAY_TIMING_FILE=big.ttrec cargo test --release --lib step_timing -- --ignored --nocapture
//! ```
//!
//! It starts at the frame before the last key frame (the farthest from the key frame before
//! it), or with `TORCHTOP_REPLAY_TIMING_START=N` at frame N, and presses `←` 30 times, or
//! `TORCHTOP_REPLAY_TIMING_STEPS` times.

use std::time::{Duration, Instant};

use jiff::tz::TimeZone;

use super::figures::Figures;
use super::player::{spawn, Command, Update};
use super::time::Moment;
use crate::record::reader::Cursor;
use crate::record::Recording;

/// Sends `command` and waits for the paused frame it gives; returns it and how long it took.
fn answer(
    commands: &std::sync::mpsc::Sender<Command>,
    updates: &mut tokio::sync::mpsc::UnboundedReceiver<Update>,
    command: Command,
) -> (Update, Duration) {
    let started = Instant::now();
    commands.send(command).expect("the player is running");
    loop {
        let update = updates.blocking_recv().expect("an update");
        // A jump with no event before it answers with a sentence and no frame.
        if update.position.paused && (update.snapshot.is_some() || update.note.is_some()) {
            return (update, started.elapsed());
        }
    }
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let slow: Vec<String> = times
        .iter()
        .filter(|t| t.as_millis() >= 100)
        .map(|t| format!("{:.0}", ms(t)))
        .collect();
    println!(
        "{what}: {} presses, median {:.1} ms, 90th percentile {:.1} ms, min {:.1} ms, \
         max {:.1} ms; {} of 100 ms or more: {}",
        times.len(),
        ms(&times[times.len() / 2]),
        ms(&times[times.len() * 9 / 10]),
        ms(&times[0]),
        ms(&times[times.len() - 1]),
        slow.len(),
        slow.join(" ")
    );
}

fn number(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
#[ignore = "a timing run on a big recording, by hand: see the module's documentation"]
fn step_timing() {
    let path = std::env::var_os("TORCHTOP_REPLAY_TIMING_FILE")
        .expect("set TORCHTOP_REPLAY_TIMING_FILE to a recording");
    let mut recording = Recording::open(std::path::Path::new(&path)).expect("a recording");
    let frames = recording.frames().to_vec();
    let mut cursor = Cursor::default();
    let mut figures: Figures = recording
        .read(&mut cursor, frames.len() - 1)
        .expect("a frame");
    figures.trim();
    println!(
        "the last frame: a decoder state of {} bytes, figures of {} bytes",
        cursor.weight(),
        figures.bytes()
    );
    let count = frames.len();
    // The frame before a key frame: the farthest from the key frame before it.
    let start = number("TORCHTOP_REPLAY_TIMING_START").unwrap_or_else(|| {
        (1..count)
            .rev()
            .find(|&i| frames[i].key && i >= 301 + 60)
            .map_or(count - 1, |i| i - 1)
    });
    let steps = number("TORCHTOP_REPLAY_TIMING_STEPS")
        .unwrap_or(30)
        .min(start);
    let first = &frames[0];
    println!(
        "{count} frames, starting at frame {start}; the recording's first frame is at {}",
        first.time
    );
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let opened = Instant::now();
    let commands = spawn(recording, start, 1.0, TimeZone::UTC, tx).expect("a player");
    let shown = updates.blocking_recv().expect("the first frame");
    println!(
        "first frame (frame {}) shown in {:.1} ms",
        shown.position.index,
        opened.elapsed().as_secs_f64() * 1000.0
    );
    let (paused, _) = answer(&commands, &mut updates, Command::Step(0));
    let mut at = paused.position.index;
    let mut back = Vec::new();
    for _ in 0..steps {
        let (update, took) = answer(&commands, &mut updates, Command::Step(-1));
        assert_eq!(update.position.index, at - 1);
        at -= 1;
        back.push(took);
    }
    report("Left (one frame back)", back);
    let mut on = Vec::new();
    for _ in 0..10 {
        let (update, took) = answer(&commands, &mut updates, Command::Step(1));
        assert_eq!(update.position.index, at + 1);
        at += 1;
        on.push(took);
    }
    report("Right (one frame on)", on);
    let mut seeks = Vec::new();
    for back_by in [120.0, 30.0, 200.0] {
        let moment = Moment {
            at: frames[at].time - back_by,
            width: 0.0,
        };
        let (update, took) = answer(&commands, &mut updates, Command::Seek(moment));
        at = update.position.index;
        seeks.push(took);
    }
    report("g (seek back 30 s to 200 s)", seeks);
    let mut jumps = Vec::new();
    for _ in 0..5 {
        let (update, took) = answer(&commands, &mut updates, Command::Jump(false));
        if update.position.index == at {
            break;
        }
        at = update.position.index;
        jumps.push(took);
    }
    if !jumps.is_empty() {
        report("[ (previous event)", jumps);
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status
        .lines()
        .filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS"))
    {
        println!("this process: {line}");
    }
}
