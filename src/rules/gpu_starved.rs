//! `gpu-starved`: a process holds GPU memory while the GPU mostly waits.
//!
//! Over a full window, the mean SM utilization of the process (NVML's per-process figure, else
//! the whole GPU's) is below the threshold while the process holds at least the minimum memory.
//! The message then says where the time likely goes: its DataLoader workers (its children) are
//! saturated, it loads data in the main process and that is saturated, the host CPU is
//! saturated, or none of these (I/O, synchronization, another rank, or idle). Graphics-only
//! processes and pids missing from /proc are left to other rules.

use crate::config::GpuStarvedConfig;
use crate::model::{ProcessKind, Severity, Subject, Warning};

use super::{
    covering, fmt_opt, fmt_percent, fmt_seconds, held_on_gpu_evidence, holds_on_gpu, mean, warning,
    Inputs, Point, ProcPoint, BYTES_PER_MIB,
};

pub(crate) const ID: &str = "gpu-starved";

const REMEDY: &str = "Feed the GPU faster: raise the DataLoader's num_workers while the CPU has \
room, set pin_memory=True and copy batches with .to(device, non_blocking=True), and set \
torch.backends.cudnn.benchmark = True when input shapes are fixed. Profile one step \
(torch.profiler) to see where the time goes.";

/// What the window says about the CPU side of the process.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CpuSide {
    workers: Option<u32>,
    worker_cpu_each: Option<f64>,
    main_cpu: Option<f64>,
    host_cpu: Option<f64>,
}

pub(crate) fn check(inputs: &Inputs, config: &GpuStarvedConfig) -> Vec<Warning> {
    covering(inputs.processes, config.window_seconds)
        .filter_map(|((pid, gpu), points)| {
            let row = inputs
                .snapshot
                .processes
                .iter()
                .find(|p| p.pid == pid && p.gpu == gpu)?;
            if row.kind == ProcessKind::Graphics || !row.visible {
                return None;
            }
            starved(pid, gpu, points, config)
        })
        .collect()
}

fn starved(
    pid: u32,
    gpu: u32,
    points: &[Point<ProcPoint>],
    config: &GpuStarvedConfig,
) -> Option<Warning> {
    let latest = points.last()?.v;
    let memory = latest.gpu_memory_bytes?;
    if (memory as f64) < config.min_memory_mib * BYTES_PER_MIB {
        return None;
    }
    let (utilization, source) = utilization(points)?;
    if utilization >= config.max_utilization_percent {
        return None;
    }
    let cpu = cpu_side(points);
    let verdict = verdict(&cpu, config);
    let message = format!(
        "{} but its SM utilization averaged {} over {}: {verdict}",
        holds_on_gpu(pid, gpu, Some(memory)),
        fmt_percent(utilization),
        fmt_seconds(config.window_seconds),
    );
    let format_cpu = |v: Option<f64>| fmt_opt(v.map(fmt_percent));
    let mut evidence = held_on_gpu_evidence(gpu, Some(memory));
    evidence.extend([
        ("mean utilization", fmt_percent(utilization)),
        ("utilization source", source.to_string()),
        ("dataloader workers", fmt_opt(cpu.workers)),
        ("cpu per worker", format_cpu(cpu.worker_cpu_each)),
        ("process cpu", format_cpu(cpu.main_cpu)),
        ("host cpu", format_cpu(cpu.host_cpu)),
    ]);
    Some(warning(
        ID,
        Severity::Warn,
        Subject::Process { pid },
        message,
        evidence,
        REMEDY,
    ))
}

/// Mean utilization over the window: the process's own SM figure where NVML gives one,
/// else the GPU's. `None` when fewer than half the samples know either.
fn utilization(points: &[Point<ProcPoint>]) -> Option<(f64, &'static str)> {
    let own: Vec<f64> = points
        .iter()
        .filter_map(|p| p.v.sm_percent.map(f64::from))
        .collect();
    let (values, source) = if own.len() * 2 >= points.len() {
        (own, "process SM (NVML)")
    } else {
        let whole: Vec<f64> = points
            .iter()
            .filter_map(|p| p.v.gpu_utilization_percent.map(f64::from))
            .collect();
        (whole, "whole GPU")
    };
    if values.len() * 2 < points.len() {
        return None;
    }
    Some((mean(values)?, source))
}

fn cpu_side(points: &[Point<ProcPoint>]) -> CpuSide {
    let workers = points.last().and_then(|p| p.v.children_count);
    let children_cpu = mean(points.iter().filter_map(|p| p.v.children_cpu_percent));
    let worker_cpu_each = match (workers, children_cpu) {
        (Some(n), Some(total)) if n > 0 => Some(total / f64::from(n)),
        _ => None,
    };
    CpuSide {
        workers,
        worker_cpu_each,
        main_cpu: mean(points.iter().filter_map(|p| p.v.cpu_percent)),
        host_cpu: mean(points.iter().filter_map(|p| p.v.host_cpu_percent)),
    }
}

/// One sentence on whether data loading looks like the bottleneck.
fn verdict(cpu: &CpuSide, config: &GpuStarvedConfig) -> String {
    let host_busy = cpu.host_cpu.filter(|&c| c >= config.host_busy_percent);
    let host_note = host_busy.map_or_else(String::new, |c| {
        format!(", and the host CPU is saturated too ({})", fmt_percent(c))
    });
    match (cpu.workers, cpu.worker_cpu_each, cpu.main_cpu) {
        (Some(n), Some(each), _) if n > 0 && each >= config.worker_busy_percent => format!(
            "its {n} DataLoader worker{} look{} saturated ({} CPU each){host_note}: data loading \
             is the bottleneck",
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "" },
            fmt_percent(each),
        ),
        (Some(0), _, Some(main)) if main >= config.main_busy_percent => format!(
            "it has no DataLoader workers and its own CPU is saturated ({}){host_note}: loading \
             data in the main process (num_workers=0) is the bottleneck",
            fmt_percent(main),
        ),
        _ => match host_busy {
            Some(c) => format!(
                "the host CPU is saturated ({}): the data pipeline is starved of CPU",
                fmt_percent(c)
            ),
            None if cpu.workers.is_none() && cpu.host_cpu.is_none() => {
                "its DataLoader workers and the host CPU could not be read, so the cause is \
                 unknown"
                    .to_string()
            }
            None => "neither its DataLoader workers nor the host CPU look saturated, so it \
                     likely waits on something else: disk or network I/O, a blocking sync \
                     (.item(), .cpu()), another rank in a collective, or it is idle"
                .to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::config::RulesConfig;
    use crate::model::{GpuProcess, ProcessKind, Snapshot, Subject};
    use crate::rules::testkit::*;

    /// One process holding 20 GiB; `shape` adjusts the row and the snapshot.
    fn history(
        sm: impl Fn(u32) -> Option<u32> + Copy,
        shape: impl Fn(&mut Snapshot, &mut GpuProcess) + Copy,
    ) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            snap.gpus = vec![gpu(0, 21 * GIB, 80 * GIB, 95)];
            snap.host.cpu_percent = Some(20.0);
            let mut p = process(5, 0, 20 * GIB);
            p.sm_percent = sm(step);
            p.cpu_percent = Some(40.0);
            p.children_count = Some(4);
            p.children_cpu_percent = Some(100.0);
            shape(&mut snap, &mut p);
            snap.processes = vec![p];
            snap
        }
    }

    fn low(step: u32) -> Option<u32> {
        Some(if step % 10 == 0 { 60 } else { 5 })
    }

    #[test]
    fn low_utilization_with_saturated_workers_blames_data_loading() {
        let warnings = replay_default(
            60,
            history(low, |_, p| {
                p.children_cpu_percent = Some(390.0);
            }),
        );
        let w = find(&warnings, "gpu-starved", &Subject::Process { pid: 5 });
        assert!(
            w.message.contains("4 DataLoader workers look saturated"),
            "{}",
            w.message
        );
        assert!(
            w.message.contains("data loading is the bottleneck"),
            "{}",
            w.message
        );
        assert_eq!(evidence(w, "cpu per worker"), "98%");
        assert_eq!(evidence(w, "utilization source"), "process SM (NVML)");
        assert!(w.remedy.contains("num_workers"));
        assert!(w.remedy.contains("pin_memory=True"));
    }

    #[test]
    fn no_workers_and_a_busy_main_process_blames_num_workers_zero() {
        let warnings = replay_default(
            60,
            history(low, |_, p| {
                p.children_count = Some(0);
                p.children_cpu_percent = Some(0.0);
                p.cpu_percent = Some(99.0);
            }),
        );
        let w = find(&warnings, "gpu-starved", &Subject::Process { pid: 5 });
        assert!(w.message.contains("num_workers=0"), "{}", w.message);
    }

    #[test]
    fn a_saturated_host_is_named() {
        let warnings = replay_default(
            60,
            history(low, |s, _| {
                s.host.cpu_percent = Some(97.0);
            }),
        );
        let w = find(&warnings, "gpu-starved", &Subject::Process { pid: 5 });
        assert!(
            w.message.contains("host CPU is saturated (97%)"),
            "{}",
            w.message
        );
    }

    #[test]
    fn idle_cpus_say_the_wait_is_elsewhere() {
        let warnings = replay_default(60, history(low, |_, _| {}));
        let w = find(&warnings, "gpu-starved", &Subject::Process { pid: 5 });
        assert!(
            w.message.contains("neither its DataLoader workers"),
            "{}",
            w.message
        );
    }

    #[test]
    fn the_gpu_utilization_stands_in_when_nvml_has_no_process_figure() {
        let warnings = replay_default(
            60,
            history(
                |_| None,
                |s, _| {
                    s.gpus[0].utilization_percent = Some(3);
                },
            ),
        );
        let w = find(&warnings, "gpu-starved", &Subject::Process { pid: 5 });
        assert_eq!(evidence(w, "utilization source"), "whole GPU");
        assert_eq!(evidence(w, "mean utilization"), "3%");
    }

    #[test]
    fn a_busy_gpu_a_short_history_a_small_holder_and_xorg_stay_silent() {
        let busy = replay_default(60, history(|_| Some(92), |_, _| {}));
        assert!(with_id(&busy, "gpu-starved").is_empty(), "{busy:#?}");
        let short = replay_default(30, history(low, |_, _| {}));
        assert!(with_id(&short, "gpu-starved").is_empty(), "{short:#?}");
        let small = replay_default(
            60,
            history(low, |_, p| {
                p.gpu_memory_bytes = Some(200 * MIB);
            }),
        );
        assert!(with_id(&small, "gpu-starved").is_empty(), "{small:#?}");
        let xorg = replay_default(60, history(low, |_, p| p.kind = ProcessKind::Graphics));
        assert!(with_id(&xorg, "gpu-starved").is_empty(), "{xorg:#?}");
    }

    #[test]
    fn a_higher_threshold_fires_where_the_default_does_not() {
        let moderate = history(|_| Some(45), |_, _| {});
        assert!(with_id(&replay_default(60, &moderate), "gpu-starved").is_empty());
        let mut config = RulesConfig::default();
        config.gpu_starved.max_utilization_percent = 50.0;
        assert_eq!(
            with_id(&replay(config, 60, moderate), "gpu-starved").len(),
            1
        );
    }
}
