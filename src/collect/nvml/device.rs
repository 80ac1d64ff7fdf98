//! The per-GPU reader: what NVML says of one device at each reading, with the fields that
//! never change read once and the slow ones every [`SLOW_EVERY`] readings.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformanceState, TemperatureSensor,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::mig::{merge_mig_processes, read_mig, read_mode};
use super::process_lists::{ListFns, ProcessLists};
use super::processes::merge_process_lists;
use super::util_samples::UtilSamples;
use super::ThrottleNames;
use crate::collect::gpu::{DeviceError, DeviceReader, DeviceReading};
use crate::collect::xid::XidWatch;
use crate::model::{GpuProcess, GpuSample, Implausible};

/// Fields that change rarely (the power limit, ECC error counts, the MIG mode) or cost much to
/// read (the energy counter) are read on every this many readings, and the last value is reported in
/// between.
const SLOW_EVERY: u32 = 10;

/// How long a per-process SM% sample stays current when NVML sends no newer one.
const PROCESS_UTIL_FRESH_FOR: Duration = Duration::from_secs(5);

/// One process's shares of the GPU from its newest utilization sample.
#[derive(Debug, Clone, Copy)]
struct ProcessUtil {
    sm: u32,
    memory: Option<u32>,
    encoder: Option<u32>,
    decoder: Option<u32>,
}

impl ProcessUtil {
    /// The shares of a process the driver has no recent sample for while it answered for the
    /// GPU: the driver samples only processes that ran work, so none ran (nvitop shows 0 too).
    const IDLE: ProcessUtil = ProcessUtil {
        sm: 0,
        memory: Some(0),
        encoder: Some(0),
        decoder: Some(0),
    };
}

/// What is read every [`SLOW_EVERY`] readings.
#[derive(Default, Clone)]
struct SlowFields {
    power_limit_w: Option<f64>,
    /// A counter that only Prometheus and the JSON show, read here because on an H200 one read
    /// took 3.2 ms of CPU (the median of 50), more than all of a reading's other calls together
    /// but the two PCIe counters'.
    energy_millijoules: Option<u64>,
    /// Whether MIG is on (it changes only with a GPU reset).
    mig_enabled: Option<bool>,
    ecc_volatile_corrected: Option<u64>,
    ecc_volatile_uncorrected: Option<u64>,
    remapped_rows: Option<RemappedRows>,
    retired_pages_pending: Option<bool>,
}

/// nvmlDeviceGetRemappedRows' answer (Ampere and later), which nvml-wrapper does not wrap.
#[derive(Default, Clone, Copy)]
struct RemappedRows {
    correctable: u64,
    uncorrectable: u64,
    pending: bool,
    failed: bool,
}

/// What is read once per device and kept.
#[derive(Default)]
struct FixedFields {
    read: bool,
    name: Option<Arc<str>>,
    uuid: Option<Arc<str>>,
    bus_id: Option<Arc<str>>,
    ecc_enabled: Option<bool>,
    fan_count: Option<u32>,
}

pub(super) struct NvmlDevice {
    nvml: Option<&'static Nvml>,
    index: u32,
    device: Option<Device<'static>>,
    fixed: FixedFields,
    slow: SlowFields,
    readings: u32,
    last_util_timestamp: u64,
    /// pid -> (its shares of the GPU, when they were sampled).
    process_sm: HashMap<u32, (ProcessUtil, Instant)>,
    /// Out-of-range values dropped since this GPU was first read.
    implausible: Implausible,
    xid: XidWatch,
    throttle_names: ThrottleNames,
    /// NVML's list functions called directly, where the library's table could be loaded.
    list_fns: Option<ListFns>,
    /// The process lists, read into buffers kept from reading to reading.
    lists: ProcessLists,
    /// The per-process utilization samples, read into a buffer kept likewise.
    util_samples: UtilSamples,
}

impl NvmlDevice {
    pub(super) fn new(nvml: Option<&'static Nvml>, index: u32, list_fns: Option<ListFns>) -> Self {
        NvmlDevice {
            nvml,
            index,
            device: None,
            fixed: FixedFields::default(),
            slow: SlowFields::default(),
            readings: 0,
            last_util_timestamp: 0,
            process_sm: HashMap::new(),
            implausible: Implausible::default(),
            xid: XidWatch::new(),
            throttle_names: ThrottleNames::default(),
            list_fns,
            lists: ProcessLists::default(),
            util_samples: UtilSamples::default(),
        }
    }
}

/// Turns one call's result into a field value, noting a lost GPU on the way.
struct Reader {
    lost: bool,
}

impl Reader {
    fn get<T>(&mut self, result: Result<T, NvmlError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(NvmlError::GpuLost) => {
                self.lost = true;
                None
            }
            Err(_) => None,
        }
    }
}

impl DeviceReader for NvmlDevice {
    fn read(&mut self) -> Result<DeviceReading, DeviceError> {
        let mut reading = DeviceReading::default();
        self.read_into(&mut reading).map(|()| reading)
    }

    fn read_into(&mut self, reading: &mut DeviceReading) -> Result<(), DeviceError> {
        let device = self.take_device()?;
        let outcome = self.read_with(&device, reading);
        self.device = Some(device);
        outcome
    }
}

impl NvmlDevice {
    fn read_with(
        &mut self,
        device: &Device<'static>,
        reading: &mut DeviceReading,
    ) -> Result<(), DeviceError> {
        let mut reader = Reader { lost: false };
        if !self.fixed.read {
            self.fixed = read_fixed(device, &mut reader);
        }
        if self.readings % SLOW_EVERY == 0 {
            self.slow = read_slow(device, &mut reader, &self.fixed);
        }
        self.readings = self.readings.wrapping_add(1);
        let mut sample = read_sample(device, &mut reader, &self.fixed, &self.slow);
        sample.index = self.index;
        let names = &mut self.throttle_names;
        sample.throttle_reasons = sample.throttle_mask.map(|mask| names.of(mask));
        if let Some(nvml) = self.nvml {
            if let Some((last, count)) = self.xid.poll(nvml, device) {
                sample.xid_last = Some(last);
                sample.xid_count = Some(count);
            }
        }
        let processes = &mut reading.processes;
        self.read_processes(device, &mut reader, processes);
        let mig = read_mig(device, self.slow.mig_enabled);
        sample.mig_enabled = mig.enabled;
        sample.mig_devices = mig.devices;
        merge_mig_processes(self.index, processes, &mig.processes);
        if reader.lost {
            return Err(DeviceError::Lost(
                "the driver reports the GPU has fallen off the bus".into(),
            ));
        }
        // The previous reading's list of implausible fields, refilled in place below.
        sample.implausible = std::mem::take(&mut reading.sample.implausible);
        self.drop_implausible(&mut sample, processes);
        reading.sample = sample;
        Ok(())
    }

    /// Out-of-range values become `None`, counted for this GPU (see [`Implausible`]).
    fn drop_implausible(&mut self, sample: &mut GpuSample, processes: &mut [GpuProcess]) {
        let mut dropped = sample.drop_implausible();
        for row in processes {
            if row
                .gpu_memory_bytes
                .is_some_and(|bytes| !sample.plausible_process_memory(bytes))
            {
                row.gpu_memory_bytes = None;
                dropped.push("process_memory");
            }
        }
        self.implausible.record(&dropped);
        sample.implausible.clone_from(&self.implausible);
    }

    /// The cached handle, or a new one. The caller puts it back.
    fn take_device(&mut self) -> Result<Device<'static>, DeviceError> {
        if let Some(device) = self.device.take() {
            return Ok(device);
        }
        let nvml = self
            .nvml
            .ok_or_else(|| DeviceError::Failed("NVML is not loaded".into()))?;
        match nvml.device_by_index(self.index) {
            Ok(device) => Ok(device),
            Err(NvmlError::GpuLost) => Err(DeviceError::Lost(
                "the driver reports the GPU has fallen off the bus".into(),
            )),
            Err(e) => Err(DeviceError::Failed(format!(
                "GPU {} could not be opened: {e}",
                self.index
            ))),
        }
    }

    /// The GPU's processes, into `rows` (cleared first, its room kept).
    fn read_processes(&mut self, device: &Device, reader: &mut Reader, rows: &mut Vec<GpuProcess>) {
        let lists = &mut self.lists;
        if let Some(fns) = self.list_fns {
            let (compute, graphics) = lists.read(fns, device);
            reader.get(compute);
            reader.get(graphics);
        } else {
            let compute = device.running_compute_processes();
            lists.compute = reader.get(compute).unwrap_or_default();
            let graphics = device.running_graphics_processes();
            lists.graphics = reader.get(graphics).unwrap_or_default();
        }
        merge_process_lists(self.index, &lists.compute, &lists.graphics, rows);
        // No process, no share to give one: the call costs milliseconds on recent GPUs.
        let answered = !rows.is_empty() && self.update_process_sm(device, reader, rows.len());
        // In MIG mode the whole GPU's samples need not cover the MIG devices' processes.
        let idle_unless_sampled = answered && self.slow.mig_enabled != Some(true);
        let now = Instant::now();
        for row in rows {
            let sampled = self
                .process_sm
                .get(&row.pid)
                .filter(|(_, when)| now.duration_since(*when) < PROCESS_UTIL_FRESH_FOR)
                .map(|(util, _)| *util);
            // A driver that cannot sample errs, and that stays N/A.
            let util = sampled.or(idle_unless_sampled.then_some(ProcessUtil::IDLE));
            row.sm_percent = util.map(|u| u.sm);
            row.memory_bandwidth_percent = util.and_then(|u| u.memory);
            row.encoder_percent = util.and_then(|u| u.encoder);
            row.decoder_percent = util.and_then(|u| u.decoder);
        }
    }

    /// Takes in the samples newer than the last reading's; false when the driver gave none
    /// because it could not, rather than because no process ran work.
    fn update_process_sm(
        &mut self,
        device: &Device,
        reader: &mut Reader,
        processes: usize,
    ) -> bool {
        let last_seen = self.last_util_timestamp;
        let samples = match self.util_samples.read(device, last_seen, processes) {
            Ok(samples) => samples,
            Err(NvmlError::NotFound) => &[],
            Err(e) => {
                reader.get::<()>(Err(e));
                return false;
            }
        };
        let now = Instant::now();
        for sample in samples {
            self.last_util_timestamp = self.last_util_timestamp.max(sample.timeStamp);
            // Zombie processes have been seen to report absurd values and pid 0.
            if sample.pid == 0 || sample.smUtil > 100 {
                continue;
            }
            let util = ProcessUtil {
                sm: sample.smUtil,
                // The other shares are percentages too; a figure above 100 is noise, not data.
                memory: Some(sample.memUtil).filter(|u| *u <= 100),
                encoder: Some(sample.encUtil).filter(|u| *u <= 100),
                decoder: Some(sample.decUtil).filter(|u| *u <= 100),
            };
            self.process_sm.insert(sample.pid, (util, now));
        }
        self.process_sm
            .retain(|_, (_, when)| now.duration_since(*when) < PROCESS_UTIL_FRESH_FOR);
        true
    }
}

fn read_fixed(device: &Device, reader: &mut Reader) -> FixedFields {
    FixedFields {
        read: true,
        name: reader.get(device.name()).map(Into::into),
        uuid: reader.get(device.uuid()).map(Into::into),
        bus_id: reader.get(device.pci_info()).map(|pci| pci.bus_id.into()),
        ecc_enabled: reader
            .get(device.is_ecc_enabled())
            .map(|ecc| ecc.currently_enabled),
        fan_count: reader.get(device.num_fans()),
    }
}

fn read_slow(device: &Device, reader: &mut Reader, fixed: &FixedFields) -> SlowFields {
    let ecc_on = fixed.ecc_enabled == Some(true);
    let mut ecc_count = |kind| {
        if ecc_on {
            reader.get(device.total_ecc_errors(kind, EccCounter::Volatile))
        } else {
            None
        }
    };
    SlowFields {
        ecc_volatile_corrected: ecc_count(MemoryError::Corrected),
        ecc_volatile_uncorrected: ecc_count(MemoryError::Uncorrected),
        power_limit_w: reader
            .get(device.enforced_power_limit())
            .map(milliwatts_to_watts),
        energy_millijoules: reader.get(device.total_energy_consumption()),
        mig_enabled: read_mode(device, &mut reader.lost),
        remapped_rows: remapped_rows(device),
        // Page retirement is the pre-Ampere scheme; a GPU that remaps rows answers
        // NOT_SUPPORTED, which the reader keeps as `None`.
        retired_pages_pending: if ecc_on {
            reader.get(device.are_pages_pending_retired())
        } else {
            None
        },
    }
}

/// The remapped-row counts, or `None` where the GPU or the library has none.
fn remapped_rows(device: &Device) -> Option<RemappedRows> {
    let function = device
        .nvml()
        .lib()
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .ok()?;
    let (mut correctable, mut uncorrectable, mut pending, mut failed) = (0, 0, 0, 0);
    // SAFETY: the symbol was resolved from the loaded library with this signature; the handle
    // comes from the live `Device`, and the four pointers are to locals that outlive the call.
    let status = unsafe {
        function(
            device.handle(),
            &raw mut correctable,
            &raw mut uncorrectable,
            &raw mut pending,
            &raw mut failed,
        )
    };
    (status == nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_SUCCESS).then_some(RemappedRows {
        correctable: u64::from(correctable),
        uncorrectable: u64::from(uncorrectable),
        pending: pending != 0,
        failed: failed != 0,
    })
}

fn read_sample(
    device: &Device,
    reader: &mut Reader,
    fixed: &FixedFields,
    slow: &SlowFields,
) -> GpuSample {
    let utilization = reader.get(device.utilization_rates());
    let memory = reader.get(device.memory_info());
    let throttle_mask = reader
        .get(device.current_throttle_reasons())
        .map(|reasons: ThrottleReasons| reasons.bits());
    GpuSample {
        name: fixed.name.clone(),
        uuid: fixed.uuid.clone(),
        bus_id: fixed.bus_id.clone(),
        utilization_percent: utilization.as_ref().map(|u| u.gpu),
        memory_utilization_percent: utilization.as_ref().map(|u| u.memory),
        memory_used_bytes: memory.as_ref().map(|m| m.used),
        memory_total_bytes: memory.as_ref().map(|m| m.total),
        memory_free_bytes: memory.as_ref().map(|m| m.free),
        energy_millijoules: slow.energy_millijoules,
        remapped_rows_correctable: slow.remapped_rows.map(|r| r.correctable),
        remapped_rows_uncorrectable: slow.remapped_rows.map(|r| r.uncorrectable),
        remapped_rows_failed: slow.remapped_rows.map(|r| r.failed),
        remapped_rows_pending: slow.remapped_rows.map(|r| r.pending),
        retired_pages_pending: slow.retired_pages_pending,
        temperature_c: reader.get(device.temperature(TemperatureSensor::Gpu)),
        power_w: reader.get(device.power_usage()).map(milliwatts_to_watts),
        power_limit_w: slow.power_limit_w,
        fan_percent: match fixed.fan_count {
            Some(0) => None,
            _ => reader.get(device.fan_speed(0)),
        },
        sm_clock_mhz: reader.get(device.clock_info(Clock::SM)),
        memory_clock_mhz: reader.get(device.clock_info(Clock::Memory)),
        pcie_rx_kib_s: reader.get(device.pcie_throughput(PcieUtilCounter::Receive)),
        pcie_tx_kib_s: reader.get(device.pcie_throughput(PcieUtilCounter::Send)),
        encoder_percent: reader
            .get(device.encoder_utilization())
            .map(|u| u.utilization),
        decoder_percent: reader
            .get(device.decoder_utilization())
            .map(|u| u.utilization),
        performance_state: reader
            .get(device.performance_state())
            .and_then(pstate_number),
        // Named by the caller, from its cache ([`ThrottleNames`]).
        throttle_reasons: None,
        throttle_mask,
        ecc_enabled: fixed.ecc_enabled,
        ecc_volatile_corrected: slow.ecc_volatile_corrected,
        ecc_volatile_uncorrected: slow.ecc_volatile_uncorrected,
        ..Default::default()
    }
}

fn milliwatts_to_watts(milliwatts: u32) -> f64 {
    f64::from(milliwatts) / 1000.0
}

fn pstate_number(state: PerformanceState) -> Option<u32> {
    use PerformanceState::{
        Eight, Eleven, Fifteen, Five, Four, Fourteen, Nine, One, Seven, Six, Ten, Thirteen, Three,
        Twelve, Two, Unknown, Zero,
    };
    let number = match state {
        Zero => 0,
        One => 1,
        Two => 2,
        Three => 3,
        Four => 4,
        Five => 5,
        Six => 6,
        Seven => 7,
        Eight => 8,
        Nine => 9,
        Ten => 10,
        Eleven => 11,
        Twelve => 12,
        Thirteen => 13,
        Fourteen => 14,
        Fifteen => 15,
        Unknown => return None,
    };
    Some(number)
}
