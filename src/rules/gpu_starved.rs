//! `gpu-starved`: a training job whose GPUs mostly wait.
//!
//! Only training processes count ([`is_training`]: an agent, or a distributed launcher's
//! RANK / LOCAL_RANK / WORLD_SIZE, and not a server, notebook or encoder), each holding at least
//! the minimum memory. They are judged together: the ranks of one job as one, else the training
//! processes of one GPU as one, so a job of eight ranks gets one warning, not eight. Over a full
//! window, the mean utilization of the group's GPUs (NVML's whole-GPU figure: a busy GPU shared
//! by several processes is not starved however small each share) must be below the threshold.
//! The message then says where the time likely goes, from the processes' CPU and their
//! DataLoader workers' (their children's): saturated workers, data loaded in the main process,
//! a training loop bound by its own CPU while its workers have room, a saturated host, or none
//! of these (I/O, synchronization, another rank, or idle).

use serde::{Deserialize, Serialize};

use crate::config::{NonNegative, Percent, Seconds};
use crate::model::{GpuProcess, ProcessKind, Severity, Subject, Warning};

use super::order::Rows;
use super::training::is_training;
use super::{fmt_bytes, fmt_opt, fmt_percent, fmt_seconds, mean, warning, Inputs, BYTES_PER_MIB};

/// `gpu-starved`: GPU memory held while the SMs idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct GpuStarvedConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// The span over which utilization must stay low. Default 60.
    pub(crate) window_seconds: Seconds,
    /// Mean SM utilization over the window below this percentage counts as low. Default 30.
    pub(crate) max_utilization_percent: Percent,
    /// The least GPU memory the process must hold, in MiB. Default 1024.
    pub(crate) min_memory_mib: NonNegative,
    /// Mean CPU% per DataLoader worker from which the workers look saturated. Default 80.
    pub(crate) worker_busy_percent: NonNegative,
    /// CPU% of the training process from which it looks saturated. Default 90.
    pub(crate) main_busy_percent: NonNegative,
    /// Host CPU% from which the host looks saturated. Default 90.
    pub(crate) host_busy_percent: Percent,
}

impl Default for GpuStarvedConfig {
    fn default() -> Self {
        GpuStarvedConfig {
            enabled: true,
            window_seconds: Seconds::new(60.0),
            max_utilization_percent: Percent::new(30.0),
            min_memory_mib: NonNegative::new(1024.0),
            worker_busy_percent: NonNegative::new(80.0),
            main_busy_percent: NonNegative::new(90.0),
            host_busy_percent: Percent::new(90.0),
        }
    }
}

pub(crate) const ID: &str = "gpu-starved";

const REMEDY: &str = "Feed the GPU faster: raise the DataLoader's num_workers while the CPU has \
room, set pin_memory=True and copy batches with .to(device, non_blocking=True), and set \
torch.backends.cudnn.benchmark = True when input shapes are fixed. Profile one step \
(torch.profiler) to see where the time goes.";

/// For a host whose CPUs are all busy: more workers would only compete for them.
const HOST_REMEDY: &str = "The host's CPUs are all busy, so more DataLoader workers would only \
compete for them: see what else runs (htop sorted by CPU%) and move it off this machine, keep \
num_workers within the cores this job is given (its cgroup's cpu.max and cpuset), and move \
per-sample work off the CPU (decode or augment on the GPU, or preprocess the dataset once).";

/// For a training process whose own core is full while its workers have room: the step's host
/// side is the bottleneck.
const LOOP_REMEDY: &str = "Profile one step (torch.profiler): many short kernels with gaps \
between them mean the GPU waits on the launches, so do more work per launch (a larger batch, \
fused ops, torch.compile, whose mode=\"reduce-overhead\" adds CUDA graphs); per-step host work \
(Python loops over tensors, .item() or .cpu() on every step, logging tensors) belongs every N \
steps or off the step. More DataLoader workers would not help: they already have room.";

/// For GPUs that wait while the data pipeline does not look saturated: no DataLoader advice.
const WAIT_REMEDY: &str = "The data pipeline does not look saturated, so find what the GPUs wait \
on: profile one step (torch.profiler) or look at the stacks (py-spy dump --pid PID); check disk \
and network reads (iostat, a slow shared filesystem), host-device syncs in the loop (.item(), \
.cpu(), printing tensors), and a slower rank holding the others in collectives. A job idle \
between phases (evaluation, checkpointing) looks the same.";

/// What the window says about the CPU side of a group of processes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CpuSide {
    workers: Option<u32>,
    worker_cpu_each: Option<f64>,
    main_cpu: Option<f64>,
    host_cpu: Option<f64>,
}

pub(crate) fn check(inputs: &Inputs, config: &GpuStarvedConfig, rows: &mut Rows) -> Vec<Warning> {
    // Grouped in kept room (a few training processes a host, or a thousand), so a tick that
    // warns of nothing allocates nothing.
    let processes = &inputs.snapshot.processes;
    let key_of = |i: usize| group_key(inputs, &processes[i]);
    let mut found = Vec::new();
    for group in rows.group(processes, |p| candidate(p, config), false, key_of) {
        let members = || group.iter().map(|&i| &processes[i]);
        let Some(utilization) = group_utilization(inputs, members(), config) else {
            continue;
        };
        if steps_stood_still(inputs, members(), config.window_seconds.get()) {
            continue;
        }
        let members: Vec<&GpuProcess> = members().collect();
        found.extend(starved(
            inputs,
            key_of(group[0]),
            &members,
            utilization,
            config,
        ));
    }
    found
}

/// Whether the group's step counters (those that have moved) all stood still over the whole
/// window: a checkpoint or an evaluation, not slow steps. A pause that lasts is
/// `training-stalled`'s to report; blaming the data pipeline for it was wrong.
fn steps_stood_still<'a>(
    inputs: &Inputs,
    members: impl Iterator<Item = &'a GpuProcess>,
    window: f64,
) -> bool {
    let since = inputs.snapshot.unix_seconds - window;
    let mut counted = members
        .filter_map(|p| inputs.steps.get(&p.pid)?.still_since())
        .peekable();
    counted.peek().is_some() && counted.all(|still| still <= since)
}

/// The process's group: its job's (a lone rank, one of a job spread over machines, is judged
/// by its GPU), else its GPU's.
fn group_key<'a>(inputs: &Inputs<'a>, process: &GpuProcess) -> GroupKey<'a> {
    match inputs.job_of(process.pid) {
        Some(job) => GroupKey::Job(&job.id),
        None => GroupKey::Gpu(process.gpu),
    }
}

/// The mean over the group's GPUs (each once, in index order) of their utilization over the
/// window; `None` when it is not low, or not known over a full window for every GPU.
fn group_utilization<'a>(
    inputs: &Inputs,
    members: impl Iterator<Item = &'a GpuProcess> + Clone,
    config: &GpuStarvedConfig,
) -> Option<f64> {
    let next_gpu = |after: Option<u32>| {
        (members.clone().map(|p| p.gpu))
            .filter(|g| after.is_none_or(|a| *g > a))
            .min()
    };
    let (mut sum, mut count) = (0.0, 0usize);
    let mut gpu = next_gpu(None);
    while let Some(g) = gpu {
        let u = gpu_utilization(inputs, g, config.window_seconds.get())?;
        if u.is_finite() {
            sum += u;
            count += 1;
        }
        gpu = next_gpu(Some(g));
    }
    let utilization = (count > 0).then(|| sum / count as f64)?;
    (utilization < config.max_utilization_percent.get()).then_some(utilization)
}

/// Jobs sort after GPUs; each is one warning.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum GroupKey<'a> {
    Gpu(u32),
    Job(&'a str),
}

fn candidate(process: &GpuProcess, config: &GpuStarvedConfig) -> bool {
    process.visible
        && process.kind != ProcessKind::Graphics
        && process
            .gpu_memory_bytes
            .is_some_and(|m| m as f64 >= config.min_memory_mib.get() * BYTES_PER_MIB)
        && is_training(process)
}

fn starved(
    inputs: &Inputs,
    key: GroupKey,
    members: &[&GpuProcess],
    utilization: f64,
    config: &GpuStarvedConfig,
) -> Option<Warning> {
    let mut gpus: Vec<u32> = members.iter().map(|p| p.gpu).collect();
    gpus.sort_unstable();
    gpus.dedup();
    let cpu = cpu_side(inputs, members, config.window_seconds.get());
    let (verdict, remedy) = verdict(&cpu, config);
    let memory: u64 = members.iter().filter_map(|p| p.gpu_memory_bytes).sum();
    let mut pids: Vec<u32> = members.iter().map(|p| p.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    let gpu_list = join(&gpus);
    // The subject names the job or GPU; the message does not repeat it.
    let (subject, who) = match key {
        GroupKey::Job(id) => (
            Subject::Job { id: id.to_string() },
            format!(
                "{} rank{} on GPU{} {gpu_list} hold{}",
                pids.len(),
                if pids.len() == 1 { "" } else { "s" },
                if gpus.len() == 1 { "" } else { "s" },
                if pids.len() == 1 { "s" } else { "" },
            ),
        ),
        GroupKey::Gpu(index) => (
            Subject::Gpu { index },
            format!(
                "training pid{} {} on GPU {index} hold{}",
                if pids.len() == 1 { "" } else { "s" },
                join(&pids),
                if pids.len() == 1 { "s" } else { "" },
            ),
        ),
    };
    let message = format!(
        "{who} {} but the GPU{} averaged {} utilization over {}: {verdict}",
        fmt_bytes(memory as f64),
        if gpus.len() == 1 { "" } else { "s" },
        fmt_percent(utilization),
        fmt_seconds(config.window_seconds.get()),
    );
    let format_cpu = |v: Option<f64>| fmt_opt(v.map(fmt_percent));
    let evidence = vec![
        ("gpus", gpu_list),
        ("processes", pids.len().to_string()),
        ("gpu memory", fmt_bytes(memory as f64)),
        ("mean gpu utilization", fmt_percent(utilization)),
        ("dataloader workers", fmt_opt(cpu.workers)),
        ("cpu per worker", format_cpu(cpu.worker_cpu_each)),
        ("process cpu", format_cpu(cpu.main_cpu)),
        ("host cpu", format_cpu(cpu.host_cpu)),
    ];
    Some(warning(
        ID,
        Severity::Warn,
        subject,
        message,
        evidence,
        remedy,
    ))
}

fn join(values: &[u32]) -> String {
    values
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The GPU's mean utilization over a full window; `None` before the window has been watched,
/// or when fewer than half its samples know the figure.
fn gpu_utilization(inputs: &Inputs, gpu: u32, seconds: f64) -> Option<f64> {
    let points = inputs.gpus.get(&gpu)?.covering(seconds)?;
    let known = || (points.iter()).filter_map(|p| p.v.utilization_percent.map(f64::from));
    if known().count() * 2 < points.len() {
        return None;
    }
    mean(known())
}

/// The CPU side of the group: its processes' busiest main CPU, its workers' CPU each (all
/// workers' summed CPU over their number), and the host's.
fn cpu_side(inputs: &Inputs, members: &[&GpuProcess], seconds: f64) -> CpuSide {
    let mut workers: Option<u32> = None;
    let mut worker_cpu: Option<f64> = None;
    let mut main_cpu: Option<f64> = None;
    let mut host_cpu: Option<f64> = None;
    for process in members {
        let Some(tracked) = inputs.processes.get(&(process.pid, process.gpu)) else {
            continue;
        };
        let points = tracked.window.recent(seconds);
        if let Some(n) = points.last().and_then(|p| p.v.children_count) {
            workers = Some(workers.unwrap_or(0) + n);
        }
        if let Some(c) = mean(points.iter().filter_map(|p| p.v.children_cpu_percent)) {
            worker_cpu = Some(worker_cpu.unwrap_or(0.0) + c);
        }
        if let Some(c) = mean(points.iter().filter_map(|p| p.v.cpu_percent)) {
            main_cpu = Some(main_cpu.map_or(c, |m: f64| m.max(c)));
        }
        host_cpu = host_cpu.or_else(|| mean(points.iter().filter_map(|p| p.v.host_cpu_percent)));
    }
    let worker_cpu_each = match (workers, worker_cpu) {
        (Some(n), Some(total)) if n > 0 => Some(total / f64::from(n)),
        _ => None,
    };
    CpuSide {
        workers,
        worker_cpu_each,
        main_cpu,
        host_cpu,
    }
}

/// One sentence on whether data loading looks like the bottleneck, and the remedy that goes
/// with it: DataLoader advice only when the CPU side is saturated.
fn verdict(cpu: &CpuSide, config: &GpuStarvedConfig) -> (String, &'static str) {
    let host_busy = cpu
        .host_cpu
        .filter(|&c| c >= config.host_busy_percent.get());
    let host_note = host_busy.map_or_else(String::new, |c| {
        format!(", and the host CPU is saturated too ({})", fmt_percent(c))
    });
    match (cpu.workers, cpu.worker_cpu_each, cpu.main_cpu) {
        (Some(n), Some(each), _) if n > 0 && each >= config.worker_busy_percent.get() => (
            format!(
                "its {n} DataLoader worker{} look{} saturated ({} CPU each){host_note}: data \
                 loading is the bottleneck",
                if n == 1 { "" } else { "s" },
                if n == 1 { "s" } else { "" },
                fmt_percent(each),
            ),
            REMEDY,
        ),
        (Some(0), _, Some(main)) if main >= config.main_busy_percent.get() => (
            format!(
                "it has no DataLoader workers and its own CPU is saturated ({}){host_note}: \
                 loading data in the main process (num_workers=0) is the bottleneck",
                fmt_percent(main),
            ),
            REMEDY,
        ),
        // Workers with room while the training process's own core is full: the loop itself
        // (Python, kernel launches, a sync that spins) keeps the GPU waiting, not the data.
        (Some(n), Some(_), Some(main)) if n > 0 && main >= config.main_busy_percent.get() => (
            format!(
                "its own CPU is saturated ({}) while its {n} DataLoader worker{} {} not{host_note}: \
                 the training loop itself is CPU-bound (Python and kernel-launch overhead, or a \
                 host-device sync that spins), not data loading",
                fmt_percent(main),
                if n == 1 { "" } else { "s" },
                if n == 1 { "is" } else { "are" },
            ),
            LOOP_REMEDY,
        ),
        _ => match host_busy {
            Some(c) => (
                format!(
                    "the host CPU is saturated ({}): the data pipeline is starved of CPU",
                    fmt_percent(c)
                ),
                HOST_REMEDY,
            ),
            None if cpu.workers.is_none() && cpu.host_cpu.is_none() => (
                "its DataLoader workers and the host CPU could not be read, so the cause is \
                 unknown"
                    .to_string(),
                WAIT_REMEDY,
            ),
            None => (
                "neither its DataLoader workers nor the host CPU look saturated, so it likely \
                 waits on something else: disk or network I/O, a blocking sync (.item(), \
                 .cpu()), another rank in a collective, or it is idle"
                    .to_string(),
                WAIT_REMEDY,
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{GpuProcess, LaunchEnv, ProcessKind, Snapshot, Subject};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    fn rank_env(rank: u32) -> Option<LaunchEnv> {
        Some(LaunchEnv {
            rank: Some(rank),
            local_rank: Some(rank),
            world_size: Some(2),
            master_addr: Some("127.0.0.1".into()),
            master_port: Some("29500".into()),
            ..Default::default()
        })
    }

    /// One training process (RANK set) holding 20 GiB on GPU 0; `util` is the GPU's own
    /// utilization, `shape` adjusts the row and the snapshot.
    fn history(
        util: impl Fn(u32) -> u32 + Copy,
        shape: impl Fn(&mut Snapshot, &mut GpuProcess) + Copy,
    ) -> impl Fn(u32) -> Snapshot {
        move |step| {
            let mut snap = at(step);
            snap.gpus = vec![gpu(0, 21 * GIB, 80 * GIB, util(step))];
            snap.host.cpu_percent = Some(20.0);
            let mut p = process(5, 0, 20 * GIB);
            p.env = Some(
                LaunchEnv {
                    rank: Some(0),
                    world_size: Some(1),
                    ..Default::default()
                }
                .into(),
            );
            p.cpu_percent = Some(40.0);
            p.children_count = Some(4);
            p.children_cpu_percent = Some(100.0);
            shape(&mut snap, &mut p);
            snap.processes = vec![p];
            snap
        }
    }

    fn low(step: u32) -> u32 {
        if step % 10 == 0 {
            60
        } else {
            5
        }
    }

    #[test]
    fn low_utilization_with_saturated_workers_blames_data_loading() {
        let warnings = replay_default(
            60,
            history(low, |_, p| {
                p.children_cpu_percent = Some(390.0);
            }),
        );
        let w = find(&warnings, "gpu-starved", &Subject::Gpu { index: 0 });
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
        assert!(w.remedy.contains("num_workers"));
        assert!(w.remedy.contains("pin_memory=True"));
    }

    /// A checkpoint: the agent's step counter stands still while the GPU idles. That is a
    /// pause (`training-stalled` reports one that lasts), not a starved data pipeline. Slow
    /// steps that still move are starvation.
    #[test]
    fn steps_that_stood_still_over_the_window_are_a_pause_not_starvation() {
        let with_steps = |moving_until: u32| {
            history(
                move |step| if step < 20 { 95 } else { 5 },
                move |s, p| {
                    let t = s.unix_seconds as u64;
                    p.torch = Some(std::sync::Arc::new(crate::model::TorchInfo {
                        step: Some(t.min(T0 as u64 + u64::from(moving_until))),
                        ..Default::default()
                    }));
                },
            )
        };
        let paused = replay_default(100, with_steps(20));
        assert!(with_id(&paused, "gpu-starved").is_empty(), "{paused:#?}");
        let slow = replay_default(100, with_steps(100));
        find(&slow, "gpu-starved", &Subject::Gpu { index: 0 });
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
        let w = find(&warnings, "gpu-starved", &Subject::Gpu { index: 0 });
        assert!(w.message.contains("num_workers=0"), "{}", w.message);
    }

    /// Found trying the monitor beside a job: a training process at 99% of its core with idle
    /// workers was told that nothing looked saturated, so that it likely waited on I/O.
    #[test]
    fn a_busy_main_process_with_idle_workers_blames_the_loop_not_the_data() {
        let warnings = replay_default(
            60,
            history(low, |_, p| {
                p.children_cpu_percent = Some(40.0);
                p.cpu_percent = Some(99.0);
            }),
        );
        let w = find(&warnings, "gpu-starved", &Subject::Gpu { index: 0 });
        assert!(
            w.message.contains(
                "its own CPU is saturated (99%) while its 4 DataLoader workers are not: the \
                 training loop itself is CPU-bound"
            ),
            "{}",
            w.message
        );
        assert!(w.remedy.contains("torch.compile"), "{}", w.remedy);
        assert!(!w.remedy.contains("pin_memory"), "{}", w.remedy);
        // Below the bar (90%), the wait is elsewhere, as before.
        let calm = replay_default(
            60,
            history(low, |_, p| {
                p.children_cpu_percent = Some(40.0);
                p.cpu_percent = Some(60.0);
            }),
        );
        let w = find(&calm, "gpu-starved", &Subject::Gpu { index: 0 });
        assert!(
            w.message.contains("neither its DataLoader workers"),
            "{}",
            w.message
        );
    }

    #[test]
    fn a_saturated_host_is_named_and_idle_cpus_say_the_wait_is_elsewhere() {
        let busy = replay_default(
            60,
            history(low, |s, _| {
                s.host.cpu_percent = Some(97.0);
            }),
        );
        let w = find(&busy, "gpu-starved", &Subject::Gpu { index: 0 });
        assert!(
            w.message.contains("host CPU is saturated (97%)"),
            "{}",
            w.message
        );
        // Not "raise num_workers while the CPU has room": it has none.
        assert!(!w.remedy.contains("has room"), "{}", w.remedy);
        assert!(w.remedy.contains("what else runs"), "{}", w.remedy);
        let idle = replay_default(60, history(low, |_, _| {}));
        let w = find(&idle, "gpu-starved", &Subject::Gpu { index: 0 });
        assert!(
            w.message.contains("neither its DataLoader workers"),
            "{}",
            w.message
        );
        assert!(
            !w.remedy.contains("num_workers"),
            "no pipeline advice: {}",
            w.remedy
        );
        assert!(w.remedy.contains("py-spy dump"), "{}", w.remedy);
    }

    #[test]
    fn a_busy_gpu_a_short_history_a_small_holder_and_xorg_stay_silent() {
        let busy = replay_default(60, history(|_| 92, |_, _| {}));
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
    fn servers_notebooks_and_plain_processes_never_get_data_pipeline_advice() {
        for command in [
            "python -m vllm.entrypoints.openai.api_server",
            "python -m ipykernel_launcher -f k.json",
            "python eval.py",
        ] {
            let warnings = replay_default(
                120,
                history(
                    |_| 2,
                    |_, p| {
                        p.command = Some(command.into());
                        if command == "python eval.py" {
                            p.env = None;
                        }
                    },
                ),
            );
            assert!(
                with_id(&warnings, "gpu-starved").is_empty(),
                "{command}: {warnings:#?}"
            );
        }
    }

    /// Eight GPUs at 47-90% shared by 64 ordinary processes whose own SM shares are tiny: the
    /// flood of issue 13. Nothing fires, however long the window has been full.
    #[test]
    fn sixty_four_ordinary_processes_on_busy_gpus_raise_nothing() {
        let warnings = replay_default(180, |step| {
            let mut snap = at(step);
            for g in 0..8 {
                snap.gpus
                    .push(gpu(g, 40 * GIB, 80 * GIB, 47 + (g * 6 + step) % 44));
                for k in 0..8 {
                    let mut p = process(1000 + g * 8 + k, g, 2 * GIB);
                    p.sm_percent = Some(k % 3);
                    p.command = Some(format!("python serve_{k}.py").into());
                    snap.processes.push(p);
                }
            }
            snap
        });
        assert!(
            with_id(&warnings, "gpu-starved").is_empty(),
            "{warnings:#?}"
        );
    }

    #[test]
    fn a_starved_two_rank_job_raises_one_warning_for_the_job() {
        let warnings = replay_default(90, |step| {
            let mut snap = at(step);
            snap.host.cpu_percent = Some(60.0);
            for rank in 0..2 {
                snap.gpus.push(gpu(rank, 21 * GIB, 80 * GIB, 5));
                let mut p = process(50 + rank, rank, 20 * GIB);
                p.env = rank_env(rank).map(Into::into);
                p.children_count = Some(2);
                p.children_cpu_percent = Some(200.0);
                p.cpu_percent = Some(30.0);
                snap.processes.push(p);
            }
            snap
        });
        let starved = with_id(&warnings, "gpu-starved");
        assert_eq!(starved.len(), 1, "{warnings:#?}");
        let id = "job 127.0.0.1:29500".to_string();
        let w = find(&warnings, "gpu-starved", &Subject::Job { id });
        assert!(w.message.contains("2 ranks on GPUs 0, 1"), "{}", w.message);
        assert_eq!(evidence(w, "dataloader workers"), "4");
        assert_eq!(evidence(w, "cpu per worker"), "100%");
    }

    #[test]
    fn a_higher_threshold_fires_where_the_default_does_not() {
        let moderate = history(|_| 45, |_, _| {});
        assert!(with_id(&replay_default(60, &moderate), "gpu-starved").is_empty());
        let mut config = RulesConfig::default();
        config.gpu_starved.max_utilization_percent = crate::config::Percent::new(50.0);
        assert_eq!(
            with_id(&replay(config, 60, moderate), "gpu-starved").len(),
            1
        );
    }
}
