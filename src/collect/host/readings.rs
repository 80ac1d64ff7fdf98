//! The host totals ([`HostCollector::sample_host`]) from the system-wide files, kept open
//! ([`HostFiles`]), and the readings the rest of the refresh shares: the uptime and the
//! activity fields of /proc/loadavg are taken once per refresh, by `sample_host`, and reused by
//! the joins and the tree view of the same refresh; the two vm sysctls, which change only
//! when an administrator sets them, are read every [`VM_SETTINGS_EVERY`].
//!
//! Under the real /proc the uptime comes from the boot-time clock, which is what the kernel
//! prints in /proc/uptime (in the reader's time namespace too), without a read. /proc/vmstat,
//! the largest of the files, is read for its OOM-kill count only: every refresh while the
//! OOM watch has GPU processes, children or cgroups to name, else every
//! [`HOST_OOM_IDLE_EVERY`] (a kill then can name nothing torchtop shows, only that it
//! happened).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::model::{HostSnapshot, MemoryInfo, SwapInfo, VmSettings};
use crate::sys::proc::{self as procfs, HostFiles};

use super::{checked_difference, HostCollector};

/// A reading of uptime or loadavg younger than this belongs to the refresh under way (the
/// joins and the tree view follow `sample_host` within milliseconds).
const SAME_REFRESH: Duration = Duration::from_millis(250);
/// How often vm.swappiness and vm.overcommit_memory are read again.
pub(crate) const VM_SETTINGS_EVERY: Duration = Duration::from_secs(10);
/// How often /proc/vmstat's OOM-kill count is read while the OOM watch has nothing to name.
pub(crate) const HOST_OOM_IDLE_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(super) struct Readings {
    files: HostFiles,
    /// Seconds since boot as last read, and when (`None` inside: unreadable).
    uptime: Option<(Instant, Option<f64>)>,
    /// The last two fields of /proc/loadavg as last read, and when.
    activity: Option<(Instant, Option<(u64, u64)>)>,
    vm: Option<(Instant, VmSettings)>,
    /// The host's OOM-kill count as last read, and when.
    oom_kills: Option<(Instant, Option<u64>)>,
    /// Whether the uptime comes from the boot-time clock (the proc root is the real /proc).
    boot_clock: bool,
}

impl Readings {
    pub(super) fn new(root: &Path) -> Self {
        Readings {
            files: HostFiles::new(root),
            uptime: None,
            activity: None,
            vm: None,
            oom_kills: None,
            boot_clock: root == Path::new(procfs::PROC_ROOT),
        }
    }

    /// Seconds since boot, in whole hundredths as /proc/uptime prints them.
    pub(super) fn uptime(&mut self) -> Option<f64> {
        if !self.boot_clock {
            return self.files.uptime().ok();
        }
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let hundredths = i128::from(now.tv_sec) * 100 + i128::from(now.tv_nsec) / 10_000_000;
        // The quotient of two exact integers, rounded once: the double /proc/uptime's text
        // parses to.
        Some(hundredths as f64 / 100.0)
    }

    /// The host's OOM-kill count: read again when `watching` (the OOM watch has something to
    /// name) or every [`HOST_OOM_IDLE_EVERY`], else as last read.
    pub(super) fn oom_kill_count(&mut self, now: Instant, watching: bool) -> Option<u64> {
        let due = watching
            || self
                .oom_kills
                .is_none_or(|(at, _)| now.saturating_duration_since(at) >= HOST_OOM_IDLE_EVERY);
        if due {
            self.oom_kills = Some((now, self.files.oom_kill_count()));
        }
        self.oom_kills.and_then(|(_, count)| count)
    }

    /// This refresh's reading if there is one, else a fresh one.
    fn shared<T: Copy>(
        kept: &mut Option<(Instant, T)>,
        files: &mut HostFiles,
        now: Instant,
        read: impl FnOnce(&mut HostFiles) -> T,
    ) -> T {
        match *kept {
            Some((at, value)) if now.saturating_duration_since(at) < SAME_REFRESH => value,
            _ => {
                let value = read(files);
                *kept = Some((now, value));
                value
            }
        }
    }

    fn vm_settings(&mut self) -> VmSettings {
        let now = Instant::now();
        let due = self
            .vm
            .as_ref()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= VM_SETTINGS_EVERY);
        if due {
            let settings = VmSettings {
                swappiness: self.files.swappiness().ok(),
                overcommit_memory: self.files.overcommit_memory().ok(),
            };
            self.vm = Some((now, settings));
        }
        self.vm
            .as_ref()
            .map(|(_, settings)| settings.clone())
            .unwrap_or_default()
    }
}

impl HostCollector {
    /// Host totals. Any file that cannot be read leaves its fields `None`; CPU% is `None` on
    /// the first call, as it needs two samples.
    pub fn sample_host(&mut self) -> HostSnapshot {
        if self.hostname.is_none() {
            self.hostname = procfs::read_hostname(&self.root)
                .ok()
                .flatten()
                .map(Into::into);
        }
        let readings = &mut self.readings;
        let files = &mut readings.files;
        let meminfo = files.meminfo().ok().unwrap_or_default();
        let stat = files.stat().ok();
        let cpu_percent = match (&stat, &self.previous_cpu) {
            (Some(now), Some(before)) => now.cpu.busy_percent_since(before),
            _ => None,
        };
        if let Some(stat) = &stat {
            self.previous_cpu = Some(stat.cpu);
        }
        let loadavg = files.loadavg().ok();
        let uptime = readings.uptime();
        let now = Instant::now();
        let oom_kill_count = readings.oom_kill_count(now, self.placement.watches_for_oom());
        readings.uptime = Some((now, uptime));
        readings.activity = Some((now, loadavg.and_then(|(_, activity)| activity)));
        let mut host = HostSnapshot {
            hostname: self.hostname.clone(),
            memory: MemoryInfo {
                total_bytes: meminfo.total_bytes,
                available_bytes: meminfo.available_bytes,
                used_bytes: checked_difference(meminfo.total_bytes, meminfo.available_bytes),
            },
            swap: SwapInfo {
                total_bytes: meminfo.swap_total_bytes,
                used_bytes: checked_difference(meminfo.swap_total_bytes, meminfo.swap_free_bytes),
            },
            vm: readings.vm_settings(),
            cpu_percent,
            cpu_count: stat.map(|s| s.cpu_count).filter(|n| *n > 0),
            load: loadavg.map(|(load, _)| load),
            uptime_seconds: uptime,
            oom_kill_count,
            pids_foreign: self.driver_pids_foreign,
            ..Default::default()
        };
        self.placement.sample_host(&mut host);
        host
    }

    /// Seconds since boot: this refresh's reading of /proc/uptime (taken by `sample_host`, or
    /// now when there is none younger than [`SAME_REFRESH`] at `now`).
    pub(super) fn uptime(&mut self, now: Instant) -> Option<f64> {
        let readings = &mut self.readings;
        match readings.uptime {
            Some((at, value)) if now.saturating_duration_since(at) < SAME_REFRESH => value,
            _ => {
                let value = readings.uptime();
                readings.uptime = Some((now, value));
                value
            }
        }
    }

    /// The activity fields of /proc/loadavg ([`procfs::parse_loadavg_activity`]), as read in
    /// this refresh, as [`HostCollector::uptime`].
    pub(super) fn loadavg_activity(&mut self, now: Instant) -> Option<(u64, u64)> {
        let readings = &mut self.readings;
        Readings::shared(&mut readings.activity, &mut readings.files, now, |files| {
            files.loadavg().ok().and_then(|(_, activity)| activity)
        })
    }
}
