//! `--once`: one snapshot as a compact text summary (like gpustat) or as one JSON document.
//! Works without a terminal: nothing here touches the TTY.

mod compact;

use std::fmt::Write as _;
use std::io::Write as _;

use crate::sampler::{self, GpuLoader, SamplerConfig};

use crate::format::{
    celsius, count, escape, opt_bytes as bytes, percent, percent_f, text as or_na, watts,
};
use crate::model::{
    DeviceAllocatorStats, GpuProcess, GpuSample, GpuState, MigDevice, Severity, Snapshot,
};

// The rule and its statuses live in the model, where `torchtop cluster --once` shares them.
pub use crate::model::{EXIT_CRITICAL, EXIT_WARN};

/// The exit status of `--once` for this snapshot: [`EXIT_CRITICAL`] while a critical warning
/// holds, [`EXIT_WARN`] while one at warn level does and `fail_at` is `warn`, else 0. With
/// `fail_at` `None` (`--fail-on never`), always 0.
pub fn exit_status(snapshot: &Snapshot, fail_at: Option<Severity>) -> u8 {
    let worst = snapshot.warnings.iter().map(|w| w.severity).max();
    crate::model::once_exit_status(worst, fail_at)
}

/// `--user` and `--gpus` for the outputs without a terminal: the processes they show, as the
/// monitor's table does. The GPUs, the host and the warnings stay whole: they are the
/// machine's, and `--once`'s exit status follows every warning.
#[derive(Debug, Clone, Default)]
pub struct ProcessFilter {
    pub user: Option<String>,
    pub gpus: Option<Vec<u32>>,
}

impl ProcessFilter {
    /// Leaves in `snapshot` only the processes the filter shows; a process with an agent that
    /// holds no GPU is shown only while no `--gpus` is given. Under `--gpus`, a shown
    /// process's allocator devices on other GPUs go too: they are those GPUs' figures (a rank
    /// on GPUs 0 and 1 shown with `--gpus 1` keeps its `cuda:` device on GPU 1 and any device
    /// not mapped to a GPU).
    pub fn apply(&self, snapshot: &mut Snapshot) {
        if self.user.is_none() && self.gpus.is_none() {
            return;
        }
        snapshot.processes.retain(|p| self.shows(p));
        let Some(gpus) = self.gpus.as_deref() else {
            return;
        };
        let elsewhere = |d: &DeviceAllocatorStats| d.gpu.is_some_and(|g| !gpus.contains(&g));
        for process in &mut snapshot.processes {
            let Some(torch) = process.torch.as_mut() else {
                continue;
            };
            if torch.devices.iter().any(elsewhere) {
                std::sync::Arc::make_mut(torch)
                    .devices
                    .retain(|d| !elsewhere(d));
            }
        }
    }

    fn shows(&self, process: &GpuProcess) -> bool {
        let user_ok = (self.user.as_deref()).is_none_or(|u| process.user.as_deref() == Some(u));
        let gpu_ok = (self.gpus.as_deref()).is_none_or(|gpus| gpus.contains(&process.gpu));
        user_ok && gpu_ok
    }

    /// The line `--once`'s text ends with while a filter hides processes: a GPU's memory then
    /// holds more than its listed processes, as the monitor's status line says.
    pub fn note(&self) -> Option<String> {
        let user = self
            .user
            .as_deref()
            .map(|u| format!(" of user {}", escape(u)));
        let gpus = self.gpus.as_deref().map(|gpus| {
            let list: Vec<String> = gpus.iter().map(u32::to_string).collect();
            format!(" on GPU {}", list.join(","))
        });
        if user.is_none() && gpus.is_none() {
            return None;
        }
        Some(format!(
            "showing only the processes{}{} (--user, --gpus); the GPUs, the host and the \
             warnings are the whole machine's\n",
            user.unwrap_or_default(),
            gpus.unwrap_or_default()
        ))
    }

    /// A sentence for each `--gpus` index the machine does not have; `None` while no driver
    /// has said how many GPUs there are: NVML still loading (a driver without persistence mode
    /// takes seconds) or not loaded lists none, and "it has no GPU" was then said of a machine
    /// with eight.
    pub fn unknown_gpus(&self, snapshot: &Snapshot) -> Option<String> {
        let driver = &snapshot.driver;
        if driver.gpu_count.is_none() && driver.amd_gpu_count.is_none() {
            return None;
        }
        crate::format::missing_gpus(self.gpus.as_deref()?, snapshot.gpus.len())
    }
}

/// How [`stream_json`] ended, when stdout did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// `--samples` documents were written, or the sampler stopped.
    Done,
    /// `--gpus` names a GPU the machine does not have: the sentence, said before any document
    /// where the driver counts the GPUs from the start, as `--once` refuses it (a review saw
    /// the stream go on with no process in it, exit 0).
    UnknownGpus(String),
}

/// Writes one JSON document per line for each snapshot the sampler publishes, until `samples`
/// have been written or stdout is closed (a pipe into `head`, say). With `compact`, each line
/// leaves out what earlier lines said (see [`compact`]).
pub fn stream_json(
    config: SamplerConfig,
    loader: GpuLoader,
    samples: Option<u64>,
    compact: bool,
    filter: ProcessFilter,
) -> std::io::Result<StreamEnd> {
    let (done_tx, done) = std::sync::mpsc::channel::<std::io::Result<StreamEnd>>();
    let mut written = 0u64;
    let mut compactor = compact::Compactor::default();
    let _requests = sampler::spawn_loop(config, loader, move |mut snapshot| {
        // Judged at each document until the driver has counted the GPUs: before any document
        // where it has from the start, as `--once` does.
        if let Some(why) = filter.unknown_gpus(&snapshot) {
            let _ = done_tx.send(Ok(StreamEnd::UnknownGpus(why)));
            return false;
        }
        filter.apply(&mut snapshot);
        let line = if compact {
            compactor.line(&snapshot)
        } else {
            crate::format::json::line(&snapshot).unwrap_or_default()
        };
        let mut out = std::io::stdout().lock();
        if let Err(error) = writeln!(out, "{line}").and_then(|()| out.flush()) {
            let _ = done_tx.send(Err(error));
            return false;
        }
        written += 1;
        if samples.is_some_and(|n| written >= n) {
            let _ = done_tx.send(Ok(StreamEnd::Done));
            return false;
        }
        true
    });
    done.recv().unwrap_or(Ok(StreamEnd::Done))
}

/// The JSON document, as documented in README.md.
pub fn json(snapshot: &Snapshot) -> String {
    crate::format::json::pretty(snapshot).unwrap_or_else(|e| {
        format!("{{\"schema\":1,\"error\":\"could not serialize the snapshot: {e}\"}}")
    })
}

/// The text summary: a header, one line per GPU with its processes, the host, the warnings.
/// Every string from outside (host name, driver messages, user names, command lines, warning
/// messages) goes through [`escape`]: this text goes to a terminal more often than not.
pub fn text(snapshot: &Snapshot) -> String {
    text_within(snapshot, None)
}

/// [`text`] for a terminal `columns` wide: a process's line is cut to it, as `ps` cuts on a
/// terminal. A command line is its owner's to write: padded past the edge, its tail wrapped
/// onto a line of its own that read as another process (a review: a row "1 root 70.0GiB"
/// under an unprivileged user's process).
pub fn text_within(snapshot: &Snapshot, columns: Option<usize>) -> String {
    // A terminal made without a size (`script`, `docker run -t`) says 0 columns: a review saw
    // every process line cut to "…".
    let columns = columns.filter(|&c| c >= MIN_COLUMNS);
    let fit = |line: String| match columns {
        Some(columns) => crate::format::cut_to_cells(&line, columns),
        None => line,
    };
    let mut out = String::new();
    let host = escape(snapshot.host.hostname.as_deref().unwrap_or("localhost"));
    let driver = &snapshot.driver;
    let _ = writeln!(
        out,
        "{host}  {}  driver {}  CUDA {}",
        snapshot.time,
        or_na(driver.driver_version.as_deref()),
        or_na(driver.cuda_version.as_deref()),
    );
    if let Some(error) = &driver.error {
        let _ = writeln!(out, "GPU: {}", escape(error));
    } else if snapshot.gpus.is_empty() {
        let _ = writeln!(out, "GPU: the driver found no GPUs");
    }
    for gpu in &snapshot.gpus {
        let _ = writeln!(out, "{}", gpu_line(gpu));
        for mig in &gpu.mig_devices {
            let _ = writeln!(out, "{}", mig_line(gpu.index, mig));
        }
        for process in snapshot
            .processes
            .iter()
            .filter(|p| !p.no_gpu && p.gpu == gpu.index)
        {
            let mig = gpu.mig_device_of(process.pid);
            let place = mig.map(|m| mig_place(gpu.index, m));
            let _ = writeln!(out, "{}", fit(process_line(process, place.as_deref())));
            let shown = |d: &DeviceAllocatorStats| shown_on_row(snapshot, process, d);
            if let Some(line) = torch_line(process, shown) {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    // Processes whose agent reports but which hold no GPU (CPU-only, or not yet on one): the
    // screen lists them too, so the summary must not drop them.
    let agent_only: Vec<&GpuProcess> = snapshot.processes.iter().filter(|p| p.no_gpu).collect();
    if !agent_only.is_empty() {
        let _ = writeln!(out, "[-] no GPU: PyTorch processes with an agent");
        for process in agent_only {
            let _ = writeln!(out, "{}", fit(process_line(process, None)));
            if let Some(line) = torch_line(process, |_| true) {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    let _ = writeln!(out, "{}", host_line(snapshot));
    if let Some(n) = snapshot.hidden_host_pids() {
        let _ = writeln!(
            out,
            "inside a container: no details for {n} GPU process{} (host pids; run on the host \
             or with --pid=host to see them)",
            if n == 1 { "" } else { "es" }
        );
    }
    for warning in &snapshot.warnings {
        let line = format!(
            "{:?} {} on {}: {}",
            warning.severity,
            escape(&warning.id),
            escape(&warning.subject.label()),
            escape(&warning.message)
        );
        match columns {
            Some(columns) => wrap_marked(&mut out, &line, columns),
            None => out.push_str(&line),
        }
        out.push('\n');
    }
    out
}

/// Fewer columns than this is a terminal that did not say its size: nothing is cut.
const MIN_COLUMNS: usize = 20;

/// Continues a line wrapped by [`wrap_marked`]: no line of the summary starts with it.
const CONTINUED: &str = "  … ";

/// `line` wrapped at spaces to `columns` cells, each line after the first marked
/// [`CONTINUED`]: a warning quotes what others wrote (command lines, an agent's error), and
/// the terminal's own wrap put its tail at the start of a line, where it read as a line of the
/// summary. Runs of spaces are written as one.
fn wrap_marked(out: &mut String, line: &str, columns: usize) {
    use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};
    if line.width() <= columns {
        out.push_str(line);
        return;
    }
    let continued_room = columns.saturating_sub(CONTINUED.width()).max(1);
    let (mut used, mut room) = (0, columns.max(1));
    let next_line = |out: &mut String, used: &mut usize, room: &mut usize| {
        out.push('\n');
        out.push_str(CONTINUED);
        *used = 0;
        *room = continued_room;
    };
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        if used > 0 && used + 1 + word.width() <= room {
            out.push(' ');
            used += 1;
        } else if used > 0 {
            next_line(out, &mut used, &mut room);
        }
        // A word wider than a line is cut where the line ends.
        for c in word.chars() {
            let width = c.width().unwrap_or(0);
            if used > 0 && used + width > room {
                next_line(out, &mut used, &mut room);
            }
            out.push(c);
            used += width;
        }
    }
}

/// One process under its GPU: its MIG device (`place`, as [`mig_place`] writes it) when it
/// runs on one, pid, user, GPU memory, where it runs when that is a container, a pod or a
/// Slurm job (as the CONTAINER column writes it, in brackets), command line (escaped).
fn process_line(process: &GpuProcess, place: Option<&str>) -> String {
    let label = process.placement_label();
    let runs_in = if label.names_a_place() {
        format!("[{}] ", escape(&label.to_string()))
    } else {
        String::new()
    };
    format!(
        "{:>5} {:>7} {:<10} {:>9}  {runs_in}{}",
        place.unwrap_or(""),
        process.pid,
        or_na(process.user.as_deref()),
        bytes(process.gpu_memory_bytes),
        escape(process.command.as_deref().unwrap_or(if process.visible {
            "N/A"
        } else {
            "(not visible here)"
        })),
    )
}

/// Whether a device of `process` goes under its row (on `process.gpu`): the device on that GPU,
/// and under the process's row on its lowest GPU, each device on none of the GPUs NVML lists
/// it on (its GPU unknown, or CUDA and NVML placing it differently), so that every device is
/// printed once.
fn shown_on_row(snapshot: &Snapshot, process: &GpuProcess, device: &DeviceAllocatorStats) -> bool {
    if device.gpu == Some(process.gpu) {
        return true;
    }
    let printed = |p: &&GpuProcess| {
        p.pid == process.pid && !p.no_gpu && snapshot.gpus.iter().any(|g| g.index == p.gpu)
    };
    let rows = snapshot.processes.iter().filter(printed);
    let placed = rows.clone().any(|p| device.gpu == Some(p.gpu));
    !placed && rows.map(|p| p.gpu).min() == Some(process.gpu)
}

/// Under a process whose agent reports: its torch, rank and step, and the caching allocator's
/// figures for the devices `shown` picks, as the monitor's PyTorch panel shows them. What the
/// agent sends is escaped.
fn torch_line(
    process: &GpuProcess,
    shown: impl Fn(&DeviceAllocatorStats) -> bool,
) -> Option<String> {
    let torch = process.torch.as_deref()?;
    let mut line = format!(
        "              PyTorch {}",
        // The agent's to write: a version padded past the edge would wrap like a forged line.
        crate::format::cut_to_cells(&escape(torch.torch.as_deref().unwrap_or("N/A")), 24)
    );
    if let Some(rank) = torch.rank {
        let _ = write!(line, "  rank {rank}");
        if let Some(world) = torch.world_size {
            let _ = write!(line, " of {world}");
        }
    }
    if let Some(step) = torch.step {
        let _ = write!(line, "  step {step}");
        if let Some(seconds) = torch.step_time_seconds {
            let _ = write!(line, " ({seconds:.3} s)");
        }
    }
    let devices = (torch.devices.iter()).filter(|d| shown(d));
    for device in devices {
        let _ = write!(
            line,
            "  cuda:{} allocated {} reserved {} peak {}",
            device.index,
            bytes(device.allocated_bytes),
            bytes(device.reserved_bytes),
            bytes(device.peak_allocated_bytes),
        );
    }
    Some(line)
}

/// A MIG device's place as the monitor's GPU column and MIG sub-rows write it: `0:1`, GPU 0's
/// MIG device 1 (as nvitop writes it).
fn mig_place(gpu: u32, mig: &MigDevice) -> String {
    format!("{gpu}:{}", mig.index)
}

/// A MIG device under its GPU, as the monitor's sub-row: place, profile (`2g.20gb`, the name
/// after " MIG "), GPU and compute instance ids, memory.
fn mig_line(gpu: u32, mig: &MigDevice) -> String {
    let profile = (mig.name.as_deref()).map(|n| n.rsplit(" MIG ").next().unwrap_or(n));
    format!(
        "  MIG {} {} | GI {} CI {} | {} / {}",
        mig_place(gpu, mig),
        or_na(profile),
        count(mig.gpu_instance_id.map(u64::from)),
        count(mig.compute_instance_id.map(u64::from)),
        bytes(mig.memory_used_bytes),
        bytes(mig.memory_total_bytes),
    )
}

fn gpu_line(gpu: &GpuSample) -> String {
    let state = match gpu.state {
        GpuState::Ok => String::new(),
        GpuState::Stale => " [stale]".to_string(),
        GpuState::Lost => " [lost]".to_string(),
    };
    let implausible = match &gpu.implausible {
        i if i.count == 0 => String::new(),
        i => format!(
            " | {} implausible values shown as N/A ({})",
            i.count,
            i.fields.join(", ")
        ),
    };
    format!(
        "[{}] {}{state} | {} {} | {} / {} | {} / {}{implausible}",
        gpu.index,
        or_na(gpu.name.as_deref()),
        celsius(gpu.temperature_c),
        percent(gpu.utilization_percent),
        bytes(gpu.memory_used_bytes),
        bytes(gpu.memory_total_bytes),
        watts(gpu.power_w),
        watts(gpu.power_limit_w),
    )
}

fn host_line(snapshot: &Snapshot) -> String {
    let host = &snapshot.host;
    let load = host.load.map_or_else(
        || "N/A".into(),
        |l| format!("{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen),
    );
    format!(
        "host: CPU {} | RAM {} used, {} available of {} | swap {} / {} | swappiness {} | overcommit {} | load {load}",
        percent_f(host.cpu_percent),
        bytes(host.memory.used_bytes),
        bytes(host.memory.available_bytes),
        bytes(host.memory.total_bytes),
        bytes(host.swap.used_bytes),
        bytes(host.swap.total_bytes),
        count(host.vm.swappiness.map(u64::from)),
        count(host.vm.overcommit_memory.map(u64::from)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_warning_names_its_job_once() {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        snapshot.warnings.push(crate::model::Warning {
            id: "imbalance".into(),
            severity: Severity::Warn,
            subject: crate::model::Subject::Job {
                id: "job 127.0.0.1:29500".into(),
            },
            message: "8 ranks out of balance over 30 s: rank 5 uses more".into(),
            evidence: vec![],
            remedy: String::new(),
            since: String::new(),
        });
        let text = text(&snapshot);
        assert!(
            text.contains("Warn imbalance on job 127.0.0.1:29500: 8 ranks out of balance"),
            "{text}"
        );
        assert_eq!(text.matches("job ").count(), 1, "{text}");
    }

    #[test]
    fn a_process_with_an_agent_and_no_gpu_is_listed_in_the_text() {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        snapshot.gpus.push(GpuSample {
            index: 0,
            ..Default::default()
        });
        let mut on_gpu = GpuProcess::new(41, 0, crate::model::ProcessKind::Compute);
        on_gpu.command = Some("python train.py".into());
        let mut cpu_only = GpuProcess::agent_only(42, crate::model::TorchInfo::default().into());
        cpu_only.command = Some("python preprocess.py\x1b[2J".into());
        snapshot.processes = vec![on_gpu, cpu_only];
        let text = text(&snapshot);
        let listed = |pid: &str| text.lines().filter(|l| l.contains(pid)).count();
        assert_eq!(listed(" 41 "), 1, "{text}");
        assert_eq!(listed(" 42 "), 1, "{text}");
        let heading = text.find("[-] no GPU").expect(&text);
        assert!(text.find("preprocess.py").unwrap() > heading, "{text}");
        assert!(!text.contains('\x1b'), "escaped: {text}");
    }

    /// A process whose agent reports gets a line of its allocator's figures under its row, for
    /// the device on that GPU; one that holds no GPU, for each of its devices.
    #[test]
    fn a_process_with_an_agent_shows_its_allocator_under_its_row() {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        for index in 0..2 {
            snapshot.gpus.push(GpuSample {
                index,
                ..Default::default()
            });
        }
        let device = |index: u32, gib: u64| crate::model::DeviceAllocatorStats {
            index,
            gpu: Some(index),
            allocated_bytes: Some(gib << 30),
            reserved_bytes: Some((gib + 2) << 30),
            peak_allocated_bytes: None,
            ..Default::default()
        };
        let torch = crate::model::TorchInfo {
            torch: Some("2.11.0\x1b[2J".into()),
            rank: Some(3),
            world_size: Some(8),
            step: Some(1200),
            step_time_seconds: Some(0.4125),
            devices: vec![device(0, 10), device(1, 20)],
            ..Default::default()
        };
        let torch = std::sync::Arc::new(torch);
        let mut rows = Vec::new();
        for gpu in 0..2 {
            let mut row = GpuProcess::new(41, gpu, crate::model::ProcessKind::Compute);
            row.torch = Some(torch.clone());
            rows.push(row);
        }
        snapshot.processes = rows;
        let text = text(&snapshot);
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("PyTorch")).collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].ends_with(
                "PyTorch 2.11.0\\e[2J  rank 3 of 8  step 1200 (0.412 s)  cuda:0 allocated \
                 10.0GiB reserved 12.0GiB peak N/A"
            ),
            "{text}"
        );
        assert!(lines[1].contains("cuda:1 allocated 20.0GiB"), "{text}");
        assert!(!lines[1].contains("cuda:0"), "{text}");
    }

    /// A review: a rank NVML lists on GPU 1 whose `cuda:0` is mapped to GPU 0 (or to no GPU)
    /// had no allocator figures in `--once` text; each device prints once, under its row.
    #[test]
    fn a_device_on_no_gpu_the_process_is_listed_on_prints_under_its_first_row() {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        for index in 0..3 {
            snapshot.gpus.push(GpuSample {
                index,
                ..Default::default()
            });
        }
        for gpu in [None, Some(0)] {
            let device = DeviceAllocatorStats {
                index: 0,
                gpu,
                allocated_bytes: Some(1 << 30),
                ..Default::default()
            };
            let torch = std::sync::Arc::new(crate::model::TorchInfo {
                devices: vec![device],
                ..Default::default()
            });
            snapshot.processes.clear();
            for on in [2, 1] {
                let mut row = GpuProcess::new(41, on, crate::model::ProcessKind::Compute);
                row.torch = Some(torch.clone());
                snapshot.processes.push(row);
            }
            let text = text(&snapshot);
            let lines: Vec<&str> = text.lines().filter(|l| l.contains("PyTorch")).collect();
            assert_eq!(lines.len(), 2, "{gpu:?}: {text}");
            assert!(lines[0].ends_with("cuda:0 allocated 1.0GiB reserved N/A peak N/A"));
            assert!(!lines[1].contains("cuda:"), "{gpu:?}: {text}");
        }
    }

    /// A review: `--once --format prometheus --gpus 1` exported a rank's `cuda:0` on GPU 0
    /// with `gpu="0"`, a GPU the filter had left out.
    #[test]
    fn gpus_leaves_out_a_shown_process_s_devices_on_other_gpus() {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        for index in 0..2 {
            snapshot.gpus.push(GpuSample {
                index,
                ..Default::default()
            });
        }
        let device = |index, gpu| DeviceAllocatorStats {
            index,
            gpu,
            allocated_bytes: Some(1 << 30),
            ..Default::default()
        };
        let torch = std::sync::Arc::new(crate::model::TorchInfo {
            devices: vec![device(0, Some(0)), device(1, Some(1)), device(2, None)],
            ..Default::default()
        });
        for on in [0, 1] {
            let mut row = GpuProcess::new(41, on, crate::model::ProcessKind::Compute);
            row.torch = Some(torch.clone());
            snapshot.processes.push(row);
        }
        let filter = ProcessFilter {
            user: None,
            gpus: Some(vec![1]),
        };
        filter.apply(&mut snapshot);
        assert_eq!(snapshot.processes.len(), 1);
        let kept = &snapshot.processes[0].torch.as_ref().unwrap().devices;
        assert_eq!(kept.iter().map(|d| d.index).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(
            torch.devices.len(),
            3,
            "the sampler's figures are not changed"
        );
    }

    /// A user's review: the monitor labels a process on a MIG device `0:1` and lists the
    /// devices under their GPU; `--once` text said neither.
    #[test]
    fn mig_devices_and_their_processes_are_labelled_as_the_monitor_does() {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        let mig = |index: u32, gi: Option<u32>, profile: &str, pid: u32| MigDevice {
            index,
            gpu_instance_id: gi,
            compute_instance_id: Some(0),
            name: Some(format!("NVIDIA A100-SXM4-80GB MIG {profile}")),
            memory_used_bytes: Some(8 << 30),
            memory_total_bytes: Some(20 << 30),
            pids: vec![pid],
            ..MigDevice::default()
        };
        snapshot.gpus.push(GpuSample {
            index: 0,
            mig_enabled: Some(true),
            mig_devices: vec![
                mig(0, Some(1), "3g.40gb", 41),
                mig(1, None, "2g.20gb\x1b[2J", 42),
            ],
            ..Default::default()
        });
        let process = |pid: u32| GpuProcess::new(pid, 0, crate::model::ProcessKind::Compute);
        snapshot.processes = vec![process(41), process(42), process(43)];
        let text = text(&snapshot);
        let line = |needle: &str| text.lines().find(|l| l.contains(needle)).expect(&text);
        assert_eq!(
            line("3g.40gb"),
            "  MIG 0:0 3g.40gb | GI 1 CI 0 | 8.0GiB / 20.0GiB"
        );
        assert_eq!(
            line("2g.20gb"),
            "  MIG 0:1 2g.20gb\\e[2J | GI N/A CI 0 | 8.0GiB / 20.0GiB"
        );
        assert!(line(" 41 ").starts_with("  0:0      41 N/A"), "{text}");
        assert!(line(" 42 ").starts_with("  0:1      42 N/A"), "{text}");
        assert!(
            line(" 43 ").starts_with("           43 N/A"),
            "not on a MIG device: {text}"
        );
    }

    #[test]
    fn missing_values_are_na_in_text_and_null_in_json() {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        snapshot.gpus.push(GpuSample {
            index: 0,
            name: Some("Test GPU".into()),
            ..Default::default()
        });
        let text = text(&snapshot);
        assert!(
            text.contains("[0] Test GPU | N/A N/A | N/A / N/A | N/A / N/A"),
            "{text}"
        );
        let doc: serde_json::Value = serde_json::from_str(&json(&snapshot)).unwrap();
        assert_eq!(doc["schema"], 1);
        assert_eq!(doc["time"], "1970-01-01T00:00:00Z");
        assert!(doc["gpus"][0]["power_w"].is_null());
        assert_eq!(doc["gpus"][0]["state"], "ok");
    }

    /// A review: an unprivileged user's command line padded with 300 spaces wrapped on the
    /// terminal into what read as a row of root's holding 70 GiB.
    #[test]
    fn a_process_line_is_cut_to_the_terminal() {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        snapshot.gpus.push(GpuSample {
            index: 0,
            ..Default::default()
        });
        let mut padded = GpuProcess::new(24564, 0, crate::model::ProcessKind::Compute);
        let forged = "1 root 70.0GiB /usr/bin/python3 /root/FORGED_ROW.py";
        padded.command = Some(format!("python3 spoof.py{}{forged}", " ".repeat(300)).into());
        snapshot.processes = vec![padded];
        let fitted = text_within(&snapshot, Some(80));
        let line = fitted.lines().find(|l| l.contains("24564")).expect(&fitted);
        assert_eq!(unicode_width::UnicodeWidthStr::width(line), 80, "{line:?}");
        assert!(
            line.ends_with('…') && !fitted.contains("FORGED"),
            "{fitted}"
        );
        // Into a pipe or a file, the whole command line.
        assert!(text(&snapshot).contains(forged));
        // A terminal that says 0 columns: nothing is cut.
        assert!(text_within(&snapshot, Some(0)).contains(forged));
    }

    /// A review: what a warning quotes (a command line, an agent's error) and an agent's torch
    /// version could be padded as a command line could.
    #[test]
    fn a_warning_wraps_with_a_mark_and_a_torch_version_is_cut() {
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        snapshot.gpus.push(GpuSample {
            index: 0,
            ..Default::default()
        });
        let forged = "1 root 70.0GiB /usr/bin/python3 /root/FORGED_ROW.py";
        let padded = format!("x{}{forged}", " ".repeat(300));
        let mut agent = GpuProcess::new(7, 0, crate::model::ProcessKind::Compute);
        let torch = crate::model::TorchInfo {
            torch: Some(padded.clone()),
            ..Default::default()
        };
        agent.torch = Some(torch.into());
        snapshot.processes = vec![agent];
        snapshot.warnings.push(crate::model::Warning {
            id: "oom".into(),
            severity: Severity::Critical,
            subject: crate::model::Subject::Process { pid: 7 },
            message: format!("pid 7 ran out of memory; no snapshot: {padded}"),
            evidence: vec![],
            remedy: String::new(),
            since: String::new(),
        });
        let fitted = text_within(&snapshot, Some(80));
        let warning = fitted.find("Critical oom").expect(&fitted);
        let quoting = |line: &&str| line.contains("PyTorch") || fitted[warning..].contains(*line);
        for line in fitted.lines().filter(quoting) {
            assert!(
                unicode_width::UnicodeWidthStr::width(line) <= 80,
                "{line:?}"
            );
        }
        assert!(
            fitted
                .lines()
                .all(|l| !l.trim_start().starts_with("1 root")),
            "{fitted}"
        );
        assert!(
            fitted[warning..].contains(&format!("\n{CONTINUED}")),
            "{fitted}"
        );
        assert!(fitted[warning..].contains("x 1 root 70.0GiB"), "{fitted}");
        assert!(
            !fitted[..warning].contains("FORGED"),
            "the version is cut: {fitted}"
        );
    }

    /// A review: `--once` named no container, where the monitor's CONTAINER column and the JSON
    /// did. A host process's cgroup (`session-3.scope`) is left out: it names no place.
    #[test]
    fn a_process_line_names_its_container_or_job_and_not_a_host_cgroup() {
        use crate::model::{Cgroup, ContainerRef, ProcessContainer};
        let mut snapshot = Snapshot::at(std::time::SystemTime::UNIX_EPOCH);
        snapshot.gpus.push(GpuSample::default());
        let mut docker = GpuProcess::new(11, 0, crate::model::ProcessKind::Compute);
        docker.cgroup = Some(std::sync::Arc::new(Cgroup {
            path: "/system.slice/docker-0123456789abcdef.scope".into(),
            container: Some(ContainerRef {
                runtime: "docker".into(),
                id: "0123456789abcdef".into(),
            }),
            ..Cgroup::default()
        }));
        let mut sif = GpuProcess::new(12, 0, crate::model::ProcessKind::Compute);
        sif.container = Some(std::sync::Arc::new(ProcessContainer {
            runtime: "apptainer".into(),
            name: Some("pytorch\x1b[2J.sif".into()),
            path: None,
        }));
        let mut host = GpuProcess::new(13, 0, crate::model::ProcessKind::Compute);
        host.cgroup = Some(std::sync::Arc::new(Cgroup {
            path: "/user.slice/user-1000.slice/session-3.scope".into(),
            ..Cgroup::default()
        }));
        snapshot.processes = vec![docker, sif, host];
        let out = text(&snapshot);
        let line = |pid: &str| {
            out.lines()
                .find(|l| l.contains(pid))
                .expect(&out)
                .to_string()
        };
        assert!(line(" 11 ").contains("[docker 0123456789ab] "), "{out}");
        assert!(line(" 12 ").contains("[apptainer pytorch"), "{out}");
        assert!(!out.contains('\x1b'), "{out:?}");
        assert!(
            !line(" 13 ").contains('[') && !out.contains("session-3"),
            "{out}"
        );
    }
}
