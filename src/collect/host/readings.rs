//! The host totals ([`HostCollector::sample_host`]) from the system-wide files, kept open
//! ([`HostFiles`]), and the readings the rest of the refresh shares: /proc/uptime and the
//! activity fields of /proc/loadavg are read once per refresh, by `sample_host`, and reused by
//! the joins and the tree view of the same refresh; the two vm sysctls, which change only
//! when an administrator sets them, are read every [`VM_SETTINGS_EVERY`].

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

#[derive(Debug)]
pub(super) struct Readings {
    files: HostFiles,
    /// Seconds since boot as last read, and when (`None` inside: unreadable).
    uptime: Option<(Instant, Option<f64>)>,
    /// The last two fields of /proc/loadavg as last read, and when.
    activity: Option<(Instant, Option<(u64, u64)>)>,
    vm: Option<(Instant, VmSettings)>,
}

impl Readings {
    pub(super) fn new(root: &Path) -> Self {
        Readings {
            files: HostFiles::new(root),
            uptime: None,
            activity: None,
            vm: None,
        }
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
        let uptime = files.uptime().ok();
        let oom_kill_count = files.oom_kill_count();
        let now = Instant::now();
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
            ..Default::default()
        };
        self.placement.sample_host(&mut host);
        host
    }

    /// Seconds since boot: this refresh's reading of /proc/uptime (taken by `sample_host`, or
    /// now when there is none younger than [`SAME_REFRESH`] at `now`).
    pub(super) fn uptime(&mut self, now: Instant) -> Option<f64> {
        let readings = &mut self.readings;
        Readings::shared(&mut readings.uptime, &mut readings.files, now, |files| {
            files.uptime().ok()
        })
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
