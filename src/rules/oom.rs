//! `oom`: a process ran out of CUDA memory, as its agent reported it. Critical (a warning once
//! its step counter has moved since, the error caught), and it names the process, the size
//! asked for, what was free, and the snapshot file the agent wrote at that moment, which
//! `torchtop snapshot FILE` opens.
//!
//! It reads [`Snapshot::ooms`](crate::model::Snapshot), which the sampler keeps after the process
//! has exited (an OOM usually ends the job), and holds for [`HOLD_SECONDS`] after the OOM: a
//! post-mortem is looked for after the fact. One warning per process, about its latest OOM.

use std::collections::BTreeMap;

use crate::model::{OomReport, Severity, Subject, Warning};

use super::{fmt_opt_bytes, warning, Inputs};

pub(crate) const ID: &str = "oom";

/// How long after an OOM its warning stays up.
pub(crate) const HOLD_SECONDS: f64 = 3600.0;

/// The most characters of the command line a message quotes.
const COMMAND_CHARS: usize = 60;

const REMEDY_WITH_FILE: &str = "Open the snapshot with `torchtop snapshot FILE` to see who held \
the memory (the Holders view), then shrink the batch or sequence length, free what the stacks \
show is kept alive, enable activation checkpointing, or set \
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when the summary shows fragmentation.";

const REMEDY_WITHOUT_FILE: &str = "Run the job under `torchtop run --record-history` so that \
the next OOM writes a memory snapshot with the stacks that held the memory; meanwhile shrink the \
batch or sequence length.";

pub(crate) fn check(inputs: &Inputs) -> Vec<Warning> {
    let now = inputs.snapshot.unix_seconds;
    let mut latest: BTreeMap<u32, &OomReport> = BTreeMap::new();
    for report in &inputs.snapshot.ooms {
        // Too old, NaN, or from an agent clock far ahead: quiet.
        let age = now - report.unix_seconds;
        if !(-HOLD_SECONDS..=HOLD_SECONDS).contains(&age) {
            continue;
        }
        let keep = latest
            .get(&report.pid)
            .is_none_or(|kept| kept.unix_seconds <= report.unix_seconds);
        if keep {
            latest.insert(report.pid, report);
        }
    }
    latest
        .into_values()
        .map(|report| oom_warning(report, went_on(inputs, report)))
        .collect()
}

/// Whether the process that had the OOM has stepped since: its agent's `step()` count now is
/// past the count its OOM event gave. The program caught the error and went on (a batch-size
/// finder, a retry with a smaller batch). The process must have started before the OOM, so that
/// a new process given the same pid does not pass for it. One snapshot is enough (`--once`);
/// a count the monitor saw move around the OOM's time is not, since a step taken just before
/// the OOM is seen a refresh later.
fn went_on(inputs: &Inputs, report: &OomReport) -> bool {
    let Some(process) = inputs.process(report.pid) else {
        return false;
    };
    let started = process
        .running_seconds
        .map(|r| inputs.snapshot.unix_seconds - r);
    let now = process.torch.as_ref().and_then(|t| t.step);
    started.is_some_and(|at| at <= report.unix_seconds)
        && matches!((report.step, now), (Some(then), Some(now)) if now > then)
}

fn oom_warning(report: &OomReport, went_on: bool) -> Warning {
    let who = match report.command.as_deref().map(short_command) {
        Some(command) => format!("pid {} ({command})", report.pid),
        None => format!("pid {}", report.pid),
    };
    let device = report
        .device
        .map_or_else(|| "a CUDA device".to_string(), |d| format!("cuda:{d}"));
    let mut message = format!("{who} ran out of memory on {device}");
    if report.requested_bytes.is_some() {
        message.push_str(&format!(
            " asking for {} with {} free",
            fmt_opt_bytes(report.requested_bytes),
            fmt_opt_bytes(report.device_free_bytes)
        ));
    }
    let remedy = match (&report.snapshot_path, &report.snapshot_error) {
        (Some(path), _) => {
            message.push_str(&format!("; snapshot: {path}"));
            REMEDY_WITH_FILE
        }
        (None, Some(error)) => {
            message.push_str(&format!("; no snapshot: {error}"));
            REMEDY_WITHOUT_FILE
        }
        (None, None) => {
            message.push_str("; no snapshot (memory history was not recorded)");
            REMEDY_WITHOUT_FILE
        }
    };
    // Caught and gone on from: still worth knowing (the job runs near its limit), but no
    // longer the critical state that `--once`'s exit status and a pager act on.
    let severity = if went_on {
        message.push_str(
            "; it went on training after it (its step counter has moved since), so the \
             program caught the error",
        );
        Severity::Warn
    } else {
        Severity::Critical
    };
    let evidence = vec![
        ("requested", fmt_opt_bytes(report.requested_bytes)),
        (
            "free on the device",
            fmt_opt_bytes(report.device_free_bytes),
        ),
        (
            "snapshot",
            report
                .snapshot_path
                .clone()
                .unwrap_or_else(|| "N/A".to_string()),
        ),
    ];
    warning(
        ID,
        severity,
        Subject::Process { pid: report.pid },
        message,
        evidence,
        remedy,
    )
}

fn short_command(command: &str) -> String {
    if command.chars().count() <= COMMAND_CHARS {
        return command.to_string();
    }
    let mut short: String = command.chars().take(COMMAND_CHARS - 1).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Severity, Snapshot, Subject};
    use crate::rules::testkit::*;

    fn report(pid: u32, t: f64, path: Option<&str>) -> OomReport {
        OomReport {
            pid,
            uid: None,
            command: Some("python train.py --batch 512".into()),
            device: Some(0),
            requested_bytes: Some(5 * GIB),
            device_free_bytes: Some(MIB),
            device_allocated_bytes: Some(80 * GIB),
            snapshot_path: path.map(str::to_string),
            snapshot_error: None,
            unix_seconds: t,
            step: None,
        }
    }

    fn with(ooms: Vec<OomReport>) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            snap.ooms = ooms.clone();
            snap
        }
    }

    #[test]
    fn an_oom_is_critical_and_names_the_process_the_size_and_the_file() {
        let path = "/run/user/0/torchtop/4242-oom-20260101-120001.pickle";
        let warnings = replay_default(3, with(vec![report(4242, T0, Some(path))]));
        let w = find(&warnings, "oom", &Subject::Process { pid: 4242 });
        assert_eq!(w.severity, Severity::Critical);
        assert!(
            w.message.contains("pid 4242 (python train.py --batch 512)"),
            "{}",
            w.message
        );
        assert!(w.message.contains("5.0GiB"), "{}", w.message);
        assert!(w.message.contains("1.0MiB free"), "{}", w.message);
        assert!(w.message.contains(path), "{}", w.message);
        assert_eq!(evidence(w, "snapshot"), path);
        assert!(w.remedy.contains("torchtop snapshot"));
    }

    #[test]
    fn without_a_file_it_says_how_to_get_one_next_time() {
        let mut failed = report(7, T0, None);
        failed.snapshot_error = Some("the OOM snapshot was not written: disk full".into());
        let warnings = replay_default(1, with(vec![report(5, T0, None), failed]));
        let w = find(&warnings, "oom", &Subject::Process { pid: 5 });
        assert!(
            w.message.contains("memory history was not recorded"),
            "{}",
            w.message
        );
        assert!(w.remedy.contains("--record-history"));
        let w = find(&warnings, "oom", &Subject::Process { pid: 7 });
        assert!(w.message.contains("disk full"), "{}", w.message);
    }

    #[test]
    fn one_warning_per_process_about_its_latest_oom() {
        let ooms = vec![report(9, T0, Some("/a")), report(9, T0 + 1.0, Some("/b"))];
        let warnings = replay_default(2, with(ooms));
        let found = with_id(&warnings, "oom");
        assert_eq!(found.len(), 1);
        assert!(
            found[0].message.ends_with("snapshot: /b"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn an_oom_older_than_the_hold_time_is_quiet() {
        let old = report(9, T0 - HOLD_SECONDS - 10.0, Some("/a"));
        let warnings = replay_default(2, with(vec![old, report(3, f64::NAN, None)]));
        assert!(with_id(&warnings, "oom").is_empty(), "{warnings:#?}");
    }

    /// A process of pid 9, started `running_seconds` before T0, that stepped every second
    /// until `stop` and had its OOM at T0 + 5, at step 5 by its agent's count.
    fn caught(stop: u32, running_seconds: f64) -> impl Fn(u32) -> Snapshot {
        move |t| {
            let oom = OomReport {
                step: Some(5),
                ..report(9, T0 + 5.0, None)
            };
            let mut snap = with(vec![oom])(t);
            let mut p = process(9, 0, GIB);
            p.running_seconds = Some(running_seconds + f64::from(t));
            p.torch = Some(std::sync::Arc::new(crate::model::TorchInfo {
                step: Some(u64::from(t.min(stop))),
                ..Default::default()
            }));
            snap.processes = vec![p];
            snap
        }
    }

    /// A review: a batch-size finder's caught OOM stayed critical for an hour, and `--once`
    /// exited 4 (critical) while the job trained on.
    #[test]
    fn an_oom_the_program_went_on_from_is_a_warning() {
        let warnings = replay_default(10, caught(10, 100.0));
        let w = find(&warnings, "oom", &Subject::Process { pid: 9 });
        assert_eq!(w.severity, Severity::Warn, "{}", w.message);
        assert!(
            w.message
                .ends_with("(its step counter has moved since), so the program caught the error"),
            "{}",
            w.message
        );
        assert_written_as_panels(w);

        // Its steps stopped at the OOM: it is stuck in it, or dying of it. The diff review:
        // a step the monitor saw a refresh after it was taken, just before the OOM, made
        // this "caught"; the count the OOM event gave tells.
        let warnings = replay_default(10, caught(5, 100.0));
        let w = find(&warnings, "oom", &Subject::Process { pid: 9 });
        assert_eq!(w.severity, Severity::Critical, "{}", w.message);
        // One snapshot is enough, as `--once` has (the review: it stayed critical there).
        let warnings = replay_default(0, |t| caught(10, 100.0)(t + 8));
        let w = find(&warnings, "oom", &Subject::Process { pid: 9 });
        assert_eq!(w.severity, Severity::Warn, "{}", w.message);
        // An agent that gave no count (an older one): nothing tells, critical.
        let without = |t| {
            let mut snap = caught(10, 100.0)(t);
            snap.ooms[0].step = None;
            snap
        };
        let w = find(
            &replay_default(10, without),
            "oom",
            &Subject::Process { pid: 9 },
        )
        .clone();
        assert_eq!(w.severity, Severity::Critical, "{}", w.message);
        // A process that started after the OOM has its pid, not its error.
        let warnings = replay_default(10, caught(10, -7.0));
        let w = find(&warnings, "oom", &Subject::Process { pid: 9 });
        assert_eq!(w.severity, Severity::Critical, "{}", w.message);
    }

    #[test]
    fn a_long_command_is_shortened() {
        let mut long = report(1, T0, None);
        long.command = Some("x".repeat(500));
        let warnings = replay_default(0, with(vec![long]));
        let w = find(&warnings, "oom", &Subject::Process { pid: 1 });
        assert!(w.message.len() < 300, "{}", w.message);
    }
}
