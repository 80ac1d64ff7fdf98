//! `torchtop replay FILE --json`: the recorded snapshots as JSON lines, each identical to the
//! line `torchtop --json` printed for it live (schema 1; the host process table, which only the
//! tree view asks the sampler for, is left out as live `--json` leaves it out).

use std::io::Write;

use crate::record::reader::{clock, Cursor};
use crate::record::{RecordError, Recording};

/// The frames from `from` to the end of the second `to` (times are written to the second, so
/// `--to 02:15:30` includes the frames taken during that second).
pub(crate) fn frames_between(
    recording: &Recording,
    from: Option<f64>,
    to: Option<f64>,
) -> std::ops::Range<usize> {
    let frames = recording.frames();
    let first = from.map_or(0, |t| frames.partition_point(|f| f.time < t));
    let end = to.map_or(frames.len(), |t| {
        frames.partition_point(|f| f.time < t + 1.0)
    });
    first..end.max(first)
}

/// Writes one JSON line per frame; frames that cannot be decoded are reported on `errors` and
/// left out. Returns how many lines were written.
pub(crate) fn json_lines(
    recording: &mut Recording,
    from: Option<f64>,
    to: Option<f64>,
    out: &mut dyn Write,
    errors: &mut dyn Write,
) -> Result<u64, RecordError> {
    let mut cursor = Cursor::default();
    let mut written = 0;
    for i in frames_between(recording, from, to) {
        let mut snapshot = match recording.snapshot(&mut cursor, i) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                let _ = writeln!(errors, "torchtop replay: {error}; left out");
                continue;
            }
        };
        snapshot.host_processes.clear();
        let line = crate::format::json::line(&snapshot)
            .map_err(|e| RecordError(format!("a frame could not be written as JSON: {e}")))?;
        if let Err(error) = writeln!(out, "{line}") {
            if error.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(written);
            }
            return Err(RecordError(format!(
                "could not write the JSON lines: {error}"
            )));
        }
        written += 1;
    }
    if written == 0 {
        let span = match (recording.frames().first(), recording.frames().last()) {
            (Some(a), Some(b)) => format!("it runs from {} to {}", clock(a.time), clock(b.time)),
            _ => "it holds no frame".to_string(),
        };
        let _ = writeln!(errors, "torchtop replay: no frame in that range; {span}");
    }
    out.flush()
        .map_err(|e| RecordError(format!("could not write the JSON lines: {e}")))?;
    Ok(written)
}
