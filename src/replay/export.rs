//! `torchtop replay FILE --json`: the recorded snapshots as JSON lines, each identical to the
//! line `torchtop --json` printed for it live (schema 1; the host process table, which only the
//! tree view asks the sampler for, is left out as live `--json` leaves it out).

use std::io::Write;

use jiff::tz::TimeZone;

use crate::record::reader::Cursor;
use crate::record::{RecordError, Recording};

/// Writes one JSON line for each frame of `range`; frames that cannot be decoded are reported on `errors` and
/// left out. Returns how many lines were written.
pub(crate) fn json_lines(
    recording: &mut Recording,
    range: std::ops::Range<usize>,
    zone: &TimeZone,
    out: &mut dyn Write,
    errors: &mut dyn Write,
) -> Result<u64, RecordError> {
    let mut cursor = Cursor::default();
    let mut written = 0;
    for i in range {
        let mut snapshot = match recording.snapshot(&mut cursor, i) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                let _ = writeln!(
                    errors,
                    "torchtop replay: {}; left out",
                    crate::format::escape(&error.to_string())
                );
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
        let span = super::summary::span_sentence(recording, zone);
        let _ = writeln!(errors, "torchtop replay: no frame in that range; {span}");
    }
    out.flush()
        .map_err(|e| RecordError(format!("could not write the JSON lines: {e}")))?;
    Ok(written)
}
