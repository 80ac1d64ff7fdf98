//! `oom-risk`: GPU memory close to the device's total, and CUDA out-of-memory errors.
//!
//! Warn when a process's allocator's peak allocated memory reaches `memory_fraction` of what
//! the process can have (its GPU's total less its memory outside PyTorch's allocator), or when
//! its `num_alloc_retries` rose within `oom_window_seconds` (the allocator already had to free
//! its cache to get memory); the subject is the process, since the remedy is in its code. Its
//! reserved memory is only evidence: a caching allocator grows its cache to fill the GPU and
//! frees it before it reports out of memory. Otherwise warn when the GPU's memory that is not
//! free (used, and what the driver reserves) does (the subject is the GPU, with its largest
//! holder as evidence). Critical when the allocator's `num_ooms` rose within
//! `oom_window_seconds`.
//!
//! The GPU-level warning stays quiet when every holder is a known inference server
//! ([`looks_like_server`](super::training::looks_like_server)) or a process judged on its
//! allocator above: vLLM and its kind take most of a GPU on purpose (`gpu_memory_utilization`),
//! and a GPU reserved that way is not about to fail anyone. A notebook kernel is no such server: a kernel that filled the GPU fails its next cell,
//! or anyone else's job there, as a script would.
//!
//! Training advice (batch size, mixed precision, FSDP) goes only to training processes
//! ([`is_training`]): on a GPU, when the process holding the most of it trains; else the remedy
//! names the largest holders, to free or move away from.

use serde::{Deserialize, Serialize};

use crate::config::{Fraction, Seconds};
use crate::model::{DeviceAllocatorStats, GpuProcess, GpuSample, Severity, Subject, Warning};

use super::training::is_training;
use super::{
    counter_rise, fmt_bytes, fmt_opt, fmt_opt_bytes, fmt_percent, fmt_seconds, torch_device_on,
    warning, AllocPoint, Inputs, Point,
};

/// `oom-risk`: memory near the GPU's total, and allocator OOMs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct OomRiskConfig {
    /// Default true.
    pub(crate) enabled: bool,
    /// Share of the GPU's total memory that used memory (or of what a process can have, its
    /// peak allocated) must reach.
    /// Default 0.95.
    pub(crate) memory_fraction: Fraction,
    /// Critical while num_ooms rose within this many seconds. Default 300.
    pub(crate) oom_window_seconds: Seconds,
}

impl Default for OomRiskConfig {
    fn default() -> Self {
        OomRiskConfig {
            enabled: true,
            memory_fraction: Fraction::new(0.95),
            oom_window_seconds: Seconds::new(300.0),
        }
    }
}

pub(crate) const ID: &str = "oom-risk";

/// For a training process: make the model and its batch fit.
const TRAINING_REMEDY: &str = "Lower the batch size; train in mixed precision \
(torch.autocast in bfloat16 where the GPU supports it; float16 also needs a GradScaler); keep \
the effective batch with gradient accumulation over smaller micro-batches; recompute activations with activation checkpointing (torch.utils.checkpoint); if the model still \
does not fit, shard it with FSDP or offload parameters and optimizer state to the CPU.";

/// For a process that is not training (a notebook, a script, a server): free or move.
const PROCESS_REMEDY: &str = "Free what the process no longer needs (`del` its tensors, then \
torch.cuda.empty_cache() hands the allocator's cache back to CUDA; restart an idle notebook \
kernel), or give it a GPU of its own (CUDA_VISIBLE_DEVICES).";

/// For a full GPU with no process listed on it.
const UNLISTED_REMEDY: &str = "NVML lists no process on this GPU (a process of another \
container or VM is not listed): find what holds it where it runs (nvidia-smi there), or start \
new work on another GPU (CUDA_VISIBLE_DEVICES).";

/// How many of a full GPU's largest holders its remedy names.
const HOLDERS_NAMED: usize = 3;

pub(crate) fn check(inputs: &Inputs, config: &OomRiskConfig) -> Vec<Warning> {
    let snapshot = inputs.snapshot;
    let mut found = Vec::new();
    for gpu in &snapshot.gpus {
        // An iterator, not a Vec: a tick without warnings allocates nothing here.
        let holders = || snapshot.processes.iter().filter(|p| p.gpu == gpu.index);
        let by_process: Vec<Warning> = holders()
            .filter_map(|p| {
                let device = torch_device_on(p, &snapshot.gpus)?;
                let window = inputs.allocators.get(&(p.pid, device.index));
                let points = window.map_or(&[][..], |tracked| {
                    tracked.window.recent(config.oom_window_seconds.get())
                });
                // Held, a process's warning too clears only clearly below the bar (its
                // allocated and active memory, where the peak is not known, waver with steps).
                let subject = Subject::Process { pid: p.pid };
                let bar = (inputs.held).bar(ID, &subject, config.memory_fraction.get());
                near_capacity(p, device, gpu, points, bar, config)
            })
            .collect();
        // Servers fill a GPU on purpose; a process with an agent is judged on its allocator
        // above, its cache being no sign of trouble; unless memory no holder accounts for
        // (another container's) fills the GPU.
        let judged = |p: &GpuProcess| {
            super::training::looks_like_server(p) || torch_device_on(p, &snapshot.gpus).is_some()
        };
        // Once warned, a GPU stays warned until its memory falls clearly below the bar: a cache
        // that wavers at 95 % raised and cleared the warning every tick.
        let subject = Subject::Gpu { index: gpu.index };
        let bar = (inputs.held).bar(ID, &subject, config.memory_fraction.get());
        let all_judged = holders().next().is_some()
            && holders().all(judged)
            && !unlisted_fills(gpu, holders(), bar);
        if by_process.is_empty() && !all_judged {
            found.extend(gpu_near_full(gpu, holders(), bar, config));
        }
        found.extend(by_process);
    }
    for (&(pid, index), tracked) in inputs.allocators {
        if reported_by_its_agent(snapshot, pid, index, config) {
            continue;
        }
        let points = tracked.window.recent(config.oom_window_seconds.get());
        let remedy = process_remedy(snapshot.processes.iter().find(|p| p.pid == pid));
        found.extend(ooms_rising(pid, index, points, config, remedy));
    }
    found
}

/// Whether the agent reported an OOM of this process on this device within the window: the
/// `oom` warning tells of it with the size asked for and the snapshot, and one OOM was two
/// critical warnings with two remedies.
fn reported_by_its_agent(
    snapshot: &crate::model::Snapshot,
    pid: u32,
    index: u32,
    config: &OomRiskConfig,
) -> bool {
    let since = snapshot.unix_seconds - config.oom_window_seconds.get();
    snapshot.ooms.iter().any(|report| {
        report.pid == pid
            && report.device.is_none_or(|device| device == index)
            && report.unix_seconds >= since
    })
}

/// Whether the GPU's used memory that its listed holders do not account for alone reaches the
/// fraction's complement of its total (unknown figures count as reaching it).
fn unlisted_fills<'a>(
    gpu: &GpuSample,
    mut holders: impl Iterator<Item = &'a GpuProcess>,
    bar: f64,
) -> bool {
    let listed: Option<u64> = holders.try_fold(0u64, |sum, p| Some(sum + p.gpu_memory_bytes?));
    match (gpu.memory_used_bytes, gpu.memory_total_bytes, listed) {
        (Some(used), Some(total), Some(listed)) => {
            used.saturating_sub(listed) as f64 >= total as f64 * (1.0 - bar)
        }
        _ => true,
    }
}

/// The bar and where a warning held on it clears: "95% (clears below 92%)".
fn threshold_text(config: &OomRiskConfig) -> String {
    let bar = config.memory_fraction.get();
    format!(
        "{} (clears below {})",
        fmt_percent(bar * 100.0),
        fmt_percent((bar - super::seen::CLEAR_MARGIN) * 100.0)
    )
}

/// A process near what it can have on its GPU: its allocator's peak use (peak allocated, else
/// the larger of allocated and active) at or above the fraction of the GPU's total less the
/// memory outside PyTorch's allocator (where known), or allocation retries within the window.
/// Reserved alone is no sign: a caching allocator grows its cache to fill the GPU, and frees it
/// and retries before it reports out of memory; a retry is that flush already happening.
fn near_capacity(
    process: &GpuProcess,
    device: &DeviceAllocatorStats,
    gpu: &GpuSample,
    points: &[Point<AllocPoint>],
    bar: f64,
    config: &OomRiskConfig,
) -> Option<Warning> {
    let total = gpu.memory_total_bytes.filter(|&t| t > 0)?;
    let peak = device.peak_allocated_bytes;
    let used = peak.or(device.allocated_bytes.max(device.active_bytes));
    let capacity = total.saturating_sub(device.non_pytorch_bytes.unwrap_or(0));
    let share = used
        .filter(|_| capacity > 0)
        .map(|u| u as f64 / capacity as f64);
    let near = share.filter(|&s| s >= bar);
    let retries = counter_rise(points, |a| a.alloc_retries).filter(|&(rise, _)| rise > 0);
    if near.is_none() && retries.is_none() {
        return None;
    }
    let mut reasons = Vec::new();
    if let (Some(share), Some(used)) = (near, used) {
        reasons.push(format!(
            "{} {} of the {} it can have on GPU {} ({})",
            if peak.is_some() { "peaked at" } else { "holds" },
            fmt_bytes(used as f64),
            fmt_bytes(capacity as f64),
            gpu.index,
            fmt_percent(share * 100.0),
        ));
    }
    if let Some((rise, _)) = retries {
        reasons.push(format!(
            "could not get memory from CUDA and freed its cache to retry {rise} time{} in the \
             last {}",
            if rise == 1 { "" } else { "s" },
            fmt_seconds(config.oom_window_seconds.get()),
        ));
    }
    let message = format!(
        "pid {}'s PyTorch allocator on cuda:{} {}: the next larger allocation may fail with \
         CUDA out of memory",
        process.pid,
        device.index,
        reasons.join(" and "),
    );
    let evidence = vec![
        ("gpu", gpu.index.to_string()),
        ("device", format!("cuda:{}", device.index)),
        ("peak allocated", fmt_opt_bytes(peak)),
        ("allocated", fmt_opt_bytes(device.allocated_bytes)),
        ("reserved", fmt_opt_bytes(device.reserved_bytes)),
        ("outside PyTorch", fmt_opt_bytes(device.non_pytorch_bytes)),
        ("can have", fmt_bytes(capacity as f64)),
        ("use share", fmt_opt(share.map(|s| fmt_percent(s * 100.0)))),
        ("threshold", threshold_text(config)),
        (
            "num_alloc_retries",
            fmt_opt(retries.map(|(_, now)| now).or(device.alloc_retries)),
        ),
        ("gpu used", fmt_opt_bytes(gpu.memory_used_bytes)),
        ("gpu total", fmt_bytes(total as f64)),
    ];
    Some(warning(
        ID,
        Severity::Warn,
        Subject::Process { pid: process.pid },
        message,
        evidence,
        process_remedy(Some(process)),
    ))
}

/// Training advice for a training process; for any other, freeing or moving. A process that is
/// not in the snapshot (its rows are gone) has an agent, which counts as training.
fn process_remedy(process: Option<&GpuProcess>) -> &'static str {
    if process.is_none_or(is_training) {
        TRAINING_REMEDY
    } else {
        PROCESS_REMEDY
    }
}

/// The remedy of a full GPU: training advice when a training process holds the most of it (all
/// of its holders train, when none has a memory figure); else its largest holders, named.
fn gpu_remedy<'a>(holders: impl Iterator<Item = &'a GpuProcess>) -> String {
    let mut ranked: Vec<&GpuProcess> = holders.collect();
    // Largest first; a holder without a figure (None) after every one with a figure.
    ranked.sort_by_key(|p| std::cmp::Reverse(p.gpu_memory_bytes));
    let Some(top) = ranked.first() else {
        return UNLISTED_REMEDY.to_string();
    };
    let trains = if top.gpu_memory_bytes.is_some() {
        is_training(top)
    } else {
        ranked.iter().all(|p| is_training(p))
    };
    if trains {
        return TRAINING_REMEDY.to_string();
    }
    let named: Vec<String> = (ranked.iter().take(HOLDERS_NAMED))
        .map(|p| match p.gpu_memory_bytes {
            Some(bytes) => format!("pid {} ({})", p.pid, fmt_bytes(bytes as f64)),
            None => format!("pid {}", p.pid),
        })
        .collect();
    format!(
        "The largest holder{}: {}. Free memory there (`del` tensors no longer needed, then \
         torch.cuda.empty_cache(); restart an idle notebook kernel) or end what is not needed, \
         or start new work on another GPU (CUDA_VISIBLE_DEVICES).",
        if named.len() == 1 { "" } else { "s" },
        named.join(", ")
    )
}

/// A GPU's memory that no program can allocate (used, and what the driver reserves) at or
/// above the fraction of its total: judged on the free figure the PyTorch panel's headroom
/// shows, so the warning and the headroom agree on how close the GPU is to full.
fn gpu_near_full<'a>(
    gpu: &GpuSample,
    holders: impl Iterator<Item = &'a GpuProcess> + Clone,
    bar: f64,
    config: &OomRiskConfig,
) -> Option<Warning> {
    let total = gpu.memory_total_bytes.filter(|&t| t > 0)?;
    let free = gpu.memory_headroom_bytes()?;
    let fraction = total.saturating_sub(free) as f64 / total as f64;
    if fraction < bar {
        return None;
    }
    let largest = (holders.clone())
        .filter(|p| p.gpu_memory_bytes.is_some())
        .max_by_key(|p| p.gpu_memory_bytes);
    let message = format!(
        "GPU {} has {} of {} free ({} in use or reserved by the driver): a process that \
         allocates more will fail with CUDA out of memory",
        gpu.index,
        fmt_bytes(free as f64),
        fmt_bytes(total as f64),
        fmt_percent(fraction * 100.0),
    );
    let largest_holder =
        fmt_opt(largest.map(|p| format!("pid {} ({})", p.pid, fmt_opt_bytes(p.gpu_memory_bytes))));
    let remedy = gpu_remedy(holders.clone());
    let evidence = vec![
        ("used", fmt_opt_bytes(gpu.memory_used_bytes)),
        ("free", fmt_bytes(free as f64)),
        ("total", fmt_bytes(total as f64)),
        ("unavailable share", fmt_percent(fraction * 100.0)),
        ("threshold", threshold_text(config)),
        ("processes", holders.count().to_string()),
        ("largest holder", largest_holder),
    ];
    Some(warning(
        ID,
        Severity::Warn,
        Subject::Gpu { index: gpu.index },
        message,
        evidence,
        &remedy,
    ))
}

/// The allocator's OOM count rose within the window.
fn ooms_rising(
    pid: u32,
    index: u32,
    points: &[Point<AllocPoint>],
    config: &OomRiskConfig,
    remedy: &str,
) -> Option<Warning> {
    let (rise, now) = counter_rise(points, |a| a.ooms)?;
    if rise == 0 {
        return None;
    }
    let latest = points.last()?.v;
    let message = format!(
        "pid {pid} hit {rise} CUDA out-of-memory error{} on cuda:{index} in the last {}",
        if rise == 1 { "" } else { "s" },
        fmt_seconds(config.oom_window_seconds.get()),
    );
    let evidence = vec![
        ("device", format!("cuda:{index}")),
        ("num_ooms", now.to_string()),
        ("new ooms", rise.to_string()),
        ("reserved", fmt_opt_bytes(latest.reserved_bytes)),
        ("allocated", fmt_opt_bytes(latest.allocated_bytes)),
    ];
    Some(warning(
        ID,
        Severity::Critical,
        Subject::Process { pid },
        message,
        evidence,
        remedy,
    ))
}

#[cfg(test)]
mod tests {
    use crate::model::{LaunchEnv, Severity, Subject};
    use crate::rules::testkit::*;
    use crate::rules::RulesConfig;

    fn one_gpu(used_percent: u64) -> crate::model::Snapshot {
        let mut snap = at(0);
        snap.gpus = vec![gpu(0, 80 * GIB * used_percent / 100, 80 * GIB, 90)];
        snap.processes = vec![process(42, 0, 80 * GIB * used_percent / 100)];
        snap
    }

    fn ranked() -> Option<std::sync::Arc<LaunchEnv>> {
        Some(
            LaunchEnv {
                rank: Some(0),
                world_size: Some(2),
                ..Default::default()
            }
            .into(),
        )
    }

    fn assert_no_training_advice(remedy: &str) {
        for advice in ["batch size", "GradScaler", "FSDP", "checkpointing"] {
            assert!(!remedy.contains(advice), "{advice} in {remedy}");
        }
    }

    #[test]
    fn ninety_six_percent_used_warns_on_the_gpu() {
        let warnings = replay_default(0, |_| {
            let mut snap = one_gpu(96);
            snap.processes[0].env = ranked();
            snap
        });
        let w = find(&warnings, "oom-risk", &Subject::Gpu { index: 0 });
        assert_eq!(w.severity, Severity::Warn);
        assert_eq!(evidence(w, "unavailable share"), "96%");
        assert_eq!(evidence(w, "largest holder"), "pid 42 (76.8GiB)");
        assert!(w.remedy.contains("GradScaler"));
        assert!(w.remedy.contains("FSDP"));
    }

    /// A review: headroom counted the driver's reserve as free. With 93% used and 3% reserved
    /// only 4% is free, under the 5% this warning is for; total minus used said 7%.
    #[test]
    fn memory_the_driver_reserves_counts_against_the_gpu() {
        let warnings = replay_default(0, |_| {
            let mut snap = one_gpu(93);
            snap.gpus[0].memory_free_bytes = Some(80 * GIB * 4 / 100);
            snap.processes[0].env = ranked();
            snap
        });
        let w = find(&warnings, "oom-risk", &Subject::Gpu { index: 0 });
        assert_eq!(evidence(w, "free"), "3.2GiB");
        assert_eq!(evidence(w, "unavailable share"), "96%");
        assert!(
            w.message
                .starts_with("GPU 0 has 3.2GiB of 80.0GiB free (96% in use or reserved"),
            "{}",
            w.message
        );
    }

    #[test]
    fn a_gpu_filled_by_an_inference_server_on_purpose_is_silent() {
        let warnings = replay_default(0, |_| {
            let mut snap = one_gpu(97);
            snap.processes[0].command = Some("python -m vllm.entrypoints.openai.api_server".into());
            snap
        });
        assert!(with_id(&warnings, "oom-risk").is_empty(), "{warnings:#?}");
    }

    /// A review: `python3 notebook_cell.py` (no RANK, no agent, no launcher) filling a GPU was
    /// told to lower its batch size and shard with FSDP.
    #[test]
    fn a_gpu_filled_by_a_plain_script_names_its_holders_instead_of_training_advice() {
        let warnings = replay_default(0, |_| {
            let mut snap = one_gpu(96);
            snap.processes[0].command = Some("python3 notebook_cell.py".into());
            snap.processes.push(process(43, 0, GIB));
            snap
        });
        let w = find(&warnings, "oom-risk", &Subject::Gpu { index: 0 });
        assert_no_training_advice(&w.remedy);
        assert!(
            w.remedy.contains("pid 42 (76.8GiB), pid 43 (1.0GiB)"),
            "{}",
            w.remedy
        );
    }

    /// A review: a Jupyter kernel holding 96% of a GPU raised nothing, being exempt as servers
    /// are; a kernel does not fill a GPU on purpose, and its next cell fails like any script.
    #[test]
    fn a_gpu_filled_by_a_jupyter_kernel_is_warned_about() {
        let warnings = replay_default(0, |_| {
            let mut snap = one_gpu(96);
            snap.processes[0].command =
                Some("/usr/bin/python3 -m ipykernel_launcher -f kernel-1.json".into());
            snap
        });
        let w = find(&warnings, "oom-risk", &Subject::Gpu { index: 0 });
        assert_no_training_advice(&w.remedy);
        assert!(
            w.remedy
                .starts_with("The largest holder: pid 42 (76.8GiB)."),
            "{}",
            w.remedy
        );
    }

    #[test]
    fn the_largest_holder_decides_between_training_advice_and_naming_holders() {
        let make = |trainer_gib: u64, notebook_gib: u64| {
            move |_| {
                let mut snap = one_gpu(96);
                snap.processes = vec![process(42, 0, trainer_gib * GIB), {
                    let mut notebook = process(43, 0, notebook_gib * GIB);
                    notebook.command = Some("python3 notebook_cell.py".into());
                    notebook
                }];
                snap.processes[0].env = ranked();
                snap
            }
        };
        let trainer_first = replay_default(0, make(60, 16));
        let w = find(&trainer_first, "oom-risk", &Subject::Gpu { index: 0 });
        assert!(w.remedy.contains("FSDP"), "{}", w.remedy);
        let notebook_first = replay_default(0, make(16, 60));
        let w = find(&notebook_first, "oom-risk", &Subject::Gpu { index: 0 });
        assert_no_training_advice(&w.remedy);
        assert!(
            w.remedy.contains("pid 43 (60.0GiB), pid 42"),
            "{}",
            w.remedy
        );
    }

    #[test]
    fn a_notebook_reserving_the_gpu_through_its_agent_gets_no_training_advice() {
        let warnings = replay_default(0, |_| {
            let mut snap = one_gpu(97);
            snap.processes[0].command = Some("python3 -m ipykernel_launcher".into());
            snap.processes[0].torch = Some(std::sync::Arc::new(torch_on(vec![device(
                0,
                77 * GIB,
                78 * GIB,
            )])));
            snap
        });
        let w = find(&warnings, "oom-risk", &Subject::Process { pid: 42 });
        assert_no_training_advice(&w.remedy);
        assert!(w.remedy.contains("empty_cache"), "{}", w.remedy);
    }

    #[test]
    fn eighty_percent_is_silent() {
        let warnings = replay_default(5, |_| one_gpu(80));
        assert!(with_id(&warnings, "oom-risk").is_empty(), "{warnings:#?}");
    }

    /// The allocator's peak and the memory outside it, as the agent reports them.
    fn peaked(
        allocated: u64,
        peak: u64,
        reserved: u64,
        outside: Option<u64>,
    ) -> crate::model::DeviceAllocatorStats {
        let mut d = device(0, allocated, reserved);
        d.peak_allocated_bytes = Some(peak);
        d.non_pytorch_bytes = outside;
        d
    }

    /// One process on an 80 GiB GPU 97% used, its allocator as given.
    fn caching(
        make: impl Fn(u32) -> crate::model::DeviceAllocatorStats,
    ) -> impl Fn(u32) -> crate::model::Snapshot {
        move |step| {
            let mut snap = one_gpu(97);
            snap.unix_seconds = T0 + f64::from(step);
            snap.time = rfc3339(snap.unix_seconds);
            snap.processes[0].env = ranked();
            snap.processes[0].torch = Some(std::sync::Arc::new(torch_on(vec![make(step)])));
            snap
        }
    }

    #[test]
    fn a_peak_near_what_the_process_can_have_warns_on_the_process_instead_of_the_gpu() {
        let warnings = replay_default(0, caching(|_| peaked(70 * GIB, 77 * GIB, 78 * GIB, None)));
        let found = with_id(&warnings, "oom-risk");
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].subject, Subject::Process { pid: 42 });
        assert_eq!(evidence(found[0], "reserved"), "78.0GiB");
        assert_eq!(evidence(found[0], "use share"), "96%");
        assert!(
            found[0].message.starts_with(
                "pid 42's PyTorch allocator on cuda:0 peaked at 77.0GiB of the 80.0GiB"
            ),
            "{}",
            found[0].message
        );
    }

    /// A review: a healthy job's cache filled the GPU (reserved 77 of 80 GiB, allocated 40, peak
    /// 60, no retries) and was told "the next larger allocation may fail" and to lower its batch
    /// size; the allocator frees its cache and retries before it reports out of memory.
    #[test]
    fn a_cache_that_fills_the_gpu_is_no_risk_while_the_peak_is_well_below() {
        let warnings = replay_default(
            3,
            caching(|_| peaked(40 * GIB, 60 * GIB, 77 * GIB, Some(GIB))),
        );
        assert!(with_id(&warnings, "oom-risk").is_empty(), "{warnings:#?}");
    }

    /// The memory outside PyTorch's allocator (the CUDA context, NCCL) is not the process's to
    /// allocate: a peak of 74.5 of 79.6 GiB (94%) is 95% of the 78.2 GiB left beside 1.4 GiB
    /// outside (the demo's context figure).
    #[test]
    fn memory_outside_pytorch_lowers_what_the_process_can_have() {
        let total = 81_559 * MIB;
        let make = |outside: Option<u64>| {
            move |_| {
                let mut snap =
                    caching(move |_| peaked(72 * GIB, 74 * GIB + GIB / 2, 78 * GIB, outside))(0);
                snap.gpus[0].memory_total_bytes = Some(total);
                snap
            }
        };
        let unknown = replay_default(0, make(None));
        assert!(with_id(&unknown, "oom-risk").is_empty(), "{unknown:#?}");
        let known = replay_default(0, make(Some(1_434 * MIB)));
        let w = find(&known, "oom-risk", &Subject::Process { pid: 42 });
        assert_eq!(evidence(w, "can have"), "78.2GiB");
        assert_eq!(evidence(w, "outside PyTorch"), "1.4GiB");
    }

    /// Allocation retries mean the allocator already had to free its cache to get memory: the
    /// job is at the GPU's limit, whatever its peak says. The demo's leaking rank 5 warns so
    /// before its OOM (tests/make_demo.rs), its peak staying under 95%.
    #[test]
    fn rising_alloc_retries_warn_and_a_steady_count_does_not() {
        let retries = |count: fn(u32) -> u64| {
            caching(move |step| {
                let mut d = peaked(40 * GIB, 60 * GIB, 77 * GIB, Some(GIB));
                d.alloc_retries = Some(count(step));
                d
            })
        };
        let rising = replay_default(3, retries(|step| u64::from(step >= 2)));
        let w = find(&rising, "oom-risk", &Subject::Process { pid: 42 });
        assert_eq!(w.severity, Severity::Warn);
        assert_eq!(evidence(w, "num_alloc_retries"), "1");
        assert!(
            w.message
                .contains("freed its cache to retry 1 time in the last 5 min"),
            "{}",
            w.message
        );
        let steady = replay_default(3, retries(|_| 4));
        assert!(with_id(&steady, "oom-risk").is_empty(), "{steady:#?}");
    }

    /// A review: the remedy paired autocast with a GradScaler, which only float16 needs.
    #[test]
    fn the_training_remedy_asks_for_a_grad_scaler_only_with_float16() {
        let warnings = replay_default(0, caching(|_| peaked(70 * GIB, 77 * GIB, 78 * GIB, None)));
        let w = find(&warnings, "oom-risk", &Subject::Process { pid: 42 });
        assert!(
            !w.remedy.contains("autocast with a GradScaler"),
            "{}",
            w.remedy
        );
        assert!(
            w.remedy.contains("float16 also needs a GradScaler"),
            "{}",
            w.remedy
        );
    }

    #[test]
    fn reserved_is_matched_to_the_gpu_through_cuda_visible_devices() {
        let warnings = replay_default(0, |_| {
            let mut snap = at(0);
            snap.gpus = vec![gpu(0, GIB, 80 * GIB, 0), gpu(1, 78 * GIB, 80 * GIB, 90)];
            let mut p = process(42, 1, 78 * GIB);
            p.env = Some(
                LaunchEnv {
                    cuda_visible_devices: Some("1".into()),
                    ..Default::default()
                }
                .into(),
            );
            p.torch = Some(std::sync::Arc::new(torch_on(vec![device(
                0,
                77 * GIB,
                78 * GIB,
            )])));
            snap.processes = vec![p];
            snap
        });
        let w = find(&warnings, "oom-risk", &Subject::Process { pid: 42 });
        assert_eq!(evidence(w, "gpu"), "1");
        assert_eq!(evidence(w, "device"), "cuda:0");
    }

    #[test]
    fn a_rising_oom_count_is_critical_and_an_old_one_is_not() {
        let make = |ooms_at: fn(u32) -> u64| {
            move |step: u32| {
                let mut snap = one_gpu(50);
                snap.unix_seconds = T0 + f64::from(step);
                snap.time = rfc3339(snap.unix_seconds);
                snap.processes[0].torch = Some(std::sync::Arc::new(torch_on(vec![with_ooms(
                    device(0, 30 * GIB, 39 * GIB),
                    ooms_at(step),
                )])));
                snap
            }
        };
        let rising = replay_default(3, make(|step| if step >= 2 { 3 } else { 2 }));
        let w = find(&rising, "oom-risk", &Subject::Process { pid: 42 });
        assert_eq!(w.severity, Severity::Critical);
        assert_eq!(evidence(w, "new ooms"), "1");
        assert_eq!(evidence(w, "num_ooms"), "3");

        let steady = replay_default(3, make(|_| 2));
        assert!(with_id(&steady, "oom-risk").is_empty(), "{steady:#?}");

        // The agent reported that OOM itself: `oom` tells of it, once.
        let reported = replay_default(3, move |step| {
            let mut snap = make(|step| if step >= 2 { 3 } else { 2 })(step);
            if step >= 2 {
                snap.ooms = vec![crate::model::OomReport {
                    pid: 42,
                    device: Some(0),
                    unix_seconds: T0 + 2.0,
                    ..Default::default()
                }];
            }
            snap
        });
        assert!(with_id(&reported, "oom-risk").is_empty(), "{reported:#?}");
        find(&reported, "oom", &Subject::Process { pid: 42 });
    }

    #[test]
    fn the_critical_state_ends_when_the_window_passes() {
        let mut config = RulesConfig::default();
        config.oom_risk.oom_window_seconds = crate::config::Seconds::new(5.0);
        let warnings = replay(config, 10, |step| {
            let mut snap = one_gpu(50);
            snap.unix_seconds = T0 + f64::from(step);
            snap.processes[0].torch = Some(std::sync::Arc::new(torch_on(vec![with_ooms(
                device(0, GIB, GIB),
                u64::from(step >= 1),
            )])));
            snap
        });
        assert!(with_id(&warnings, "oom-risk").is_empty(), "{warnings:#?}");
    }

    /// Found trying the monitor: a GPU whose memory wavered between 94 % and 96 % raised and
    /// cleared oom-risk every tick, each time with a new "since".
    #[test]
    fn a_gpu_wavering_at_the_bar_keeps_one_warning_until_it_falls_clearly_below() {
        let mut engine = crate::rules::Engine::new(RulesConfig::default());
        let mut sinces = Vec::new();
        for (step, used) in [96, 94, 96, 94, 93, 96, 91, 94].into_iter().enumerate() {
            let mut snap = one_gpu(used);
            snap.unix_seconds = T0 + step as f64;
            let warnings = engine.evaluate(&snap);
            let held = with_id(&warnings, "oom-risk");
            sinces.push(held.first().map(|w| (used, w.since.clone())));
        }
        let first = sinces[0].clone().map(|(_, since)| since);
        for (step, seen) in sinces.iter().enumerate().take(6) {
            assert_eq!(
                seen.as_ref().map(|(_, since)| since.clone()),
                first,
                "step {step}: held since the first, down to 93 %: {sinces:?}"
            );
        }
        assert_eq!(sinces[6], None, "91 % is clearly below: cleared");
        assert_eq!(sinces[7], None, "94 % does not raise it again: {sinces:?}");
    }

    /// The process's own warning, judged on allocated memory where the peak is not known,
    /// wavered the same way.
    #[test]
    fn a_process_wavering_at_the_bar_keeps_one_warning_until_it_falls_clearly_below() {
        let mut engine = crate::rules::Engine::new(RulesConfig::default());
        let held: Vec<bool> = [96, 94, 96, 93, 91, 94]
            .into_iter()
            .enumerate()
            .map(|(step, percent)| {
                let mut snap = one_gpu(50);
                snap.unix_seconds = T0 + step as f64;
                let mut on_gpu = device(0, 80 * GIB * percent / 100, 80 * GIB * percent / 100);
                on_gpu.gpu = Some(0);
                on_gpu.non_pytorch_bytes = Some(0);
                snap.processes[0].torch = Some(std::sync::Arc::new(torch_on(vec![on_gpu])));
                let warnings = engine.evaluate(&snap);
                let subject = Subject::Process { pid: 42 };
                (warnings.iter()).any(|w| w.id == "oom-risk" && w.subject == subject)
            })
            .collect();
        assert_eq!(held, [true, true, true, true, false, false]);
    }

    #[test]
    fn a_lower_threshold_fires_where_the_default_does_not() {
        let mut config = RulesConfig::default();
        config.oom_risk.memory_fraction = crate::config::Fraction::new(0.75);
        assert!(with_id(&replay_default(0, |_| one_gpu(80)), "oom-risk").is_empty());
        let warnings = replay(config, 0, |_| one_gpu(80));
        let w = find(&warnings, "oom-risk", &Subject::Gpu { index: 0 });
        assert_eq!(evidence(w, "threshold"), "75% (clears below 72%)");
    }

    #[test]
    fn unknown_memory_figures_never_fire() {
        let warnings = replay_default(0, |_| {
            let mut snap = at(0);
            let mut g = gpu(0, 0, 0, 90);
            g.memory_used_bytes = None;
            g.memory_total_bytes = Some(80 * GIB);
            snap.gpus = vec![g];
            snap
        });
        assert!(warnings.is_empty(), "{warnings:#?}");
    }
}
