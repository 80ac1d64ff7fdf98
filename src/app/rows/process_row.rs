//! [`ProcessRow`]: one row of the process table, borrowed from the snapshot through its
//! [`super::RowRef`], and the figures each column and action reads from it (a tree row sums
//! the GPUs its process holds); [`RowKey`], what the selection follows across refreshes.

use crate::actions::ProcessIdentity;
use crate::format;
use crate::model::tree::TreeRole;
use crate::model::{GpuProcess, HostProcess, ProcessKind, Snapshot};

use super::{basename_parts, program_basename};

/// The GPU processes of a row, borrowed from the snapshot through the row's indices; indices
/// that no longer exist are skipped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowGpus<'a> {
    processes: &'a [GpuProcess],
    indices: &'a [usize],
}

impl<'a> RowGpus<'a> {
    pub(super) fn new(processes: &'a [GpuProcess], indices: &'a [usize]) -> Self {
        RowGpus { processes, indices }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &'a GpuProcess> + Clone + 'a {
        let processes = self.processes;
        self.indices.iter().filter_map(move |&i| processes.get(i))
    }

    pub(crate) fn first(&self) -> Option<&'a GpuProcess> {
        self.iter().next()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.iter().count()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.first().is_none()
    }
}

/// A row ready to draw or act on.
#[derive(Debug, Clone)]
pub(crate) struct ProcessRow<'a> {
    pub(crate) pid: u32,
    pub(crate) gpus: RowGpus<'a>,
    pub(crate) host: Option<&'a HostProcess>,
    pub(crate) tree: Option<(&'a str, TreeRole)>,
}

/// What the selection follows across refreshes: the process, and the GPU of its row in the flat
/// table (a process on two GPUs has two rows there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RowKey {
    pub(crate) pid: u32,
    pub(crate) start_ticks: Option<u64>,
    pub(crate) gpu: Option<u32>,
}

impl RowKey {
    /// Whether both keys name one process (pid and start time), on whichever of its rows.
    pub(crate) fn same_process(&self, other: &RowKey) -> bool {
        self.pid == other.pid && self.start_ticks == other.start_ticks
    }
}

impl<'a> ProcessRow<'a> {
    /// Pid and start time; `None` where /proc does not show the process, which then must not
    /// be acted on.
    pub(crate) fn identity(&self) -> Option<ProcessIdentity> {
        match self.host {
            Some(host) => Some(ProcessIdentity::of_host_process(host)),
            None => self
                .gpus
                .iter()
                .find(|g| g.visible)
                .and_then(ProcessIdentity::of_gpu_process),
        }
    }

    pub(crate) fn key(&self) -> RowKey {
        RowKey {
            pid: self.pid,
            start_ticks: self.identity().map(|id| id.start_ticks),
            gpu: match self.tree {
                Some(_) => None,
                None => self.gpus.first().map(|g| g.gpu),
            },
        }
    }

    /// Whether the row holds GPU `index` (a tree row holds every GPU of its process).
    pub(crate) fn holds_gpu(&self, index: u32) -> bool {
        self.gpus.iter().any(|g| g.gpu == index)
    }

    /// Whether /proc shows the process on this machine.
    pub(crate) fn visible(&self) -> bool {
        self.host.is_some() || self.gpus.iter().any(|g| g.visible)
    }

    pub(crate) fn uid(&self) -> Option<u32> {
        self.host
            .and_then(|h| h.uid)
            .or_else(|| self.gpus.iter().find_map(|g| g.uid))
    }

    pub(crate) fn user(&self) -> Option<&'a str> {
        self.host
            .and_then(|h| h.user.as_deref())
            .or_else(|| self.gpus.iter().find_map(|g| g.user.as_deref()))
    }

    /// The command line; a process without one (a zombie, a kernel thread) shows its short
    /// name in brackets, as ps does.
    pub(crate) fn command(&self) -> Option<String> {
        if let Some(command) = self.gpus.iter().find_map(|g| g.command.as_deref()) {
            return Some(command.to_string());
        }
        let host = self.host?;
        Some(match &host.command {
            Some(command) => command.clone(),
            None => format!("[{}]", host.comm),
        })
    }

    /// The command as the table shows it: the program by its basename, as htop does
    /// (`python3 train.py`, not `/home/alice/.pyenv/.../python3 train.py`), escaped for the
    /// terminal; `None` where /proc does not show the process.
    pub(crate) fn display_command(&self) -> Option<String> {
        if !self.visible() {
            return None;
        }
        let command = self.command()?;
        Some(format::escape(&program_basename(&command)).into_owned())
    }

    /// [`Self::display_command`] written at the end of `out`, without a `String` of its own
    /// where the command has one (escaping aside): whether the row has a command to show.
    pub(crate) fn write_display_command(&self, out: &mut String) -> bool {
        if !self.visible() {
            return false;
        }
        let command = match self.gpus.iter().find_map(|g| g.command.as_deref()) {
            Some(command) => command,
            None => match self.host {
                Some(HostProcess {
                    command: Some(command),
                    ..
                }) => command,
                // "[comm]", made for the occasion: rare, and only in the tree.
                Some(_) => return self.display_command().map(|c| out.push_str(&c)).is_some(),
                None => return false,
            },
        };
        // Escaping works a character at a time and leaves spaces alone: the parts escaped
        // one by one read as the joined command escaped.
        let (base, rest) = basename_parts(command);
        out.push_str(&format::escape(base));
        if let Some(rest) = rest {
            out.push(' ');
            out.push_str(&format::escape(rest));
        }
        true
    }

    /// "rank/world" of a torch process, from its agent or else its launcher's variables (or
    /// its Slurm task's);
    /// "torch" for an agent that reports no rank; `None` for any other process.
    pub(crate) fn rank_text(&self) -> Option<String> {
        let mut text = String::new();
        self.write_rank_text(&mut text).then_some(text)
    }

    /// [`Self::rank_text`] written at the end of `out`: whether there is one.
    pub(crate) fn write_rank_text(&self, out: &mut String) -> bool {
        use std::fmt::Write as _;
        let torch = self.gpus.iter().find_map(|g| g.torch.as_ref());
        let env = self.gpus.iter().find_map(|g| g.env.as_ref());
        // Slurm's task number stands in where no launcher set RANK, as the JOB line reads it.
        let slurm = self.gpus.iter().find_map(|g| g.slurm.as_ref());
        let rank = (torch.and_then(|t| t.rank))
            .or(env.and_then(|e| e.rank))
            .or(slurm.and_then(|s| s.proc_id));
        let world = (torch.and_then(|t| t.world_size))
            .or(env.and_then(|e| e.world_size))
            .or(slurm.and_then(|s| s.ntasks));
        // Writing into a String does not fail.
        let _ = match (rank, world) {
            (Some(r), Some(w)) => write!(out, "{r}/{w}"),
            (Some(r), None) => write!(out, "{r}"),
            _ if torch.is_some() => out.write_str("torch"),
            _ => return false,
        };
        true
    }

    /// Whether the row holds a GPU: not a tree row without one, nor a process listed for its
    /// agent only.
    pub(crate) fn is_gpu(&self) -> bool {
        self.gpus.iter().any(|g| !g.no_gpu)
    }

    pub(crate) fn cpu_percent(&self) -> Option<f64> {
        self.gpu_or_host(|g| g.cpu_percent, |h| h.cpu_percent)
    }

    pub(crate) fn rss_bytes(&self) -> Option<u64> {
        self.gpu_or_host(|g| g.rss_bytes, |h| h.rss_bytes)
    }

    pub(crate) fn nice(&self) -> Option<i32> {
        self.gpu_or_host(|g| g.nice, |h| h.nice)
    }

    /// The process state letter (R, S, D, T, Z, ...).
    pub(crate) fn state(&self) -> Option<char> {
        self.gpu_or_host(|g| g.state, |h| Some(h.state))
    }

    /// The row's GPU memory as a share of its GPUs' memory (of its MIG device's, on one), 0-100.
    pub(crate) fn gpu_memory_percent(&self, snapshot: &Snapshot) -> Option<f64> {
        let used = self.gpu_memory_bytes()?;
        let total: u64 = self
            .gpus
            .iter()
            .map(|g| snapshot.gpu(g.gpu)?.memory_total_for(g.pid))
            .sum::<Option<u64>>()?;
        percent_of(used, total)
    }

    /// Resident memory as a share of the host's memory, 0-100, as htop's MEM%.
    pub(crate) fn host_memory_percent(&self, snapshot: &Snapshot) -> Option<f64> {
        percent_of(self.rss_bytes()?, snapshot.host.memory.total_bytes?)
    }

    /// When the process started, in seconds since the Unix epoch.
    pub(crate) fn start_unix_seconds(&self, snapshot: &Snapshot) -> Option<f64> {
        let running = self.running_seconds()?;
        (snapshot.unix_seconds > 0.0).then_some(snapshot.unix_seconds - running)
    }

    /// The GPU memory of every GPU on the row, summed; `None` if any is unknown.
    pub(crate) fn gpu_memory_bytes(&self) -> Option<u64> {
        if self.gpus.is_empty() {
            return None;
        }
        self.gpus.iter().map(|g| g.gpu_memory_bytes).sum()
    }

    /// SM utilization over every GPU on the row, summed; `None` if any is unknown.
    pub(crate) fn sm_percent(&self) -> Option<u32> {
        self.gpu_share(|g| g.sm_percent)
    }

    /// A share of the GPU summed over the process's rows; `None` if any row lacks it.
    pub(crate) fn gpu_share(&self, share: impl Fn(&GpuProcess) -> Option<u32>) -> Option<u32> {
        if self.gpus.is_empty() {
            return None;
        }
        self.gpus.iter().map(share).sum()
    }

    /// How long the process has run; a tree row without a GPU (a DataLoader worker) has it
    /// from the host table.
    pub(crate) fn running_seconds(&self) -> Option<f64> {
        self.gpus
            .first()
            .and_then(|g| g.running_seconds)
            .or_else(|| self.host.and_then(|h| h.running_seconds))
    }

    /// The kind of GPU use; a process both computing and drawing on several GPUs reads "Both".
    pub(crate) fn kind(&self) -> Option<ProcessKind> {
        let first = self.gpus.first()?.kind;
        Some(if self.gpus.iter().all(|g| g.kind == first) {
            first
        } else {
            ProcessKind::Both
        })
    }

    fn gpu_or_host<T>(
        &self,
        from_gpu: impl Fn(&GpuProcess) -> Option<T>,
        from_host: impl Fn(&HostProcess) -> Option<T>,
    ) -> Option<T> {
        self.gpus
            .first()
            .and_then(from_gpu)
            .or_else(|| self.host.and_then(from_host))
    }
}

fn percent_of(part: u64, total: u64) -> Option<f64> {
    (total > 0).then(|| part as f64 * 100.0 / total as f64)
}
