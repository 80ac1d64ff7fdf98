//! The scenario: what the fake machine looks like, read from TOML. Owns the file format, its
//! defaults, its validation (every error names the line) and the evaluation of time-varying
//! metrics. It knows nothing about the C ABI or the global state.

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::path::Path;

use crate::abi::{self, nvmlReturn_t};

/// Most GPUs a scenario may declare (the handle space of this library).
pub const MAX_GPUS: usize = 256;

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub system: System,
    #[serde(default)]
    pub init: InitSpec,
    #[serde(default, rename = "gpu")]
    pub gpus: Vec<GpuSpec>,
}

/// Driver-wide facts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct System {
    pub driver_version: String,
    pub nvml_version: String,
    /// CUDA driver version as NVML encodes it: 1000 * major + 10 * minor (12040 = 12.4).
    pub cuda_driver_version: i32,
    /// What t counts from.
    pub time_origin: TimeOrigin,
}

/// What t (the argument of every metric function) counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeOrigin {
    /// Seconds since this process's last `nvmlInit`.
    #[default]
    Init,
    /// Seconds since the Unix epoch: separate processes (torchtop, nvtop, nvitop side by side)
    /// see the same values at the same moment.
    Wall,
}

impl Default for System {
    fn default() -> Self {
        Self {
            driver_version: "550.54.15".into(),
            nvml_version: "12.550.54.15".into(),
            cuda_driver_version: 12040,
            time_origin: TimeOrigin::Init,
        }
    }
}

/// How `nvmlInit` behaves.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InitSpec {
    /// Return this code from every init call (e.g. `"DRIVER_NOT_LOADED"`).
    pub fail: Option<ReturnCode>,
    /// Sentence `nvmlErrorString` gives for the `fail` code, instead of the standard one.
    pub message: Option<String>,
    /// Seconds each init call takes (a driver without persistence mode takes seconds).
    pub delay_s: f64,
}

/// An NVML return code, written in a scenario by its header name or number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReturnCode(pub nvmlReturn_t);

impl<'de> Deserialize<'de> for ReturnCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ReturnCode;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an NVML error name such as \"DRIVER_NOT_LOADED\", or its number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ReturnCode, E> {
                abi::return_code_by_name(v)
                    .map(ReturnCode)
                    .ok_or_else(|| E::custom(format!("unknown NVML error name `{v}`")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ReturnCode, E> {
                u32::try_from(v)
                    .map(ReturnCode)
                    .map_err(|_| E::custom(format!("{v} is not an NVML return code")))
            }
        }
        d.deserialize_any(V)
    }
}

/// One NVML query family; used to mark a GPU's fields unsupported or hanging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    Name,
    Uuid,
    PciInfo,
    Index,
    MinorNumber,
    Utilization,
    Memory,
    Temperature,
    TemperatureThreshold,
    Power,
    PowerLimit,
    EnforcedPowerLimit,
    NumFans,
    Fan,
    Clocks,
    MaxClocks,
    PcieThroughput,
    PcieLink,
    Encoder,
    Decoder,
    Pstate,
    ThrottleReasons,
    EccMode,
    EccErrors,
    Energy,
    RemappedRows,
    RetiredPages,
    ComputeProcesses,
    GraphicsProcesses,
    ProcessUtilization,
    PersistenceMode,
    ComputeMode,
    MigMode,
    Display,
    /// The event calls: supported event types, registration, waits.
    Events,
}

/// What `nvmlDeviceGetRemappedRows` answers.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRowsSpec {
    #[serde(default)]
    pub correctable: u32,
    #[serde(default)]
    pub uncorrectable: u32,
    #[serde(default)]
    pub pending: bool,
    #[serde(default)]
    pub failed: bool,
}

/// One Xid error: its code (79 is "GPU has fallen off the bus", 48 a double-bit ECC error,
/// 13 and 31 a program's fault) and when it happens.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidSpec {
    pub at_s: f64,
    pub code: u64,
}

/// What `nvmlDeviceGetRetiredPages*` and `nvmlDeviceGetRetiredPagesPendingStatus` answer
/// (page retirement, the pre-Ampere scheme).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredPagesSpec {
    /// Pages retired after multiple single-bit errors.
    #[serde(default)]
    pub single_bit: u32,
    /// Pages retired after a double-bit error.
    #[serde(default)]
    pub double_bit: u32,
    /// Whether a retirement waits for the next driver reload.
    #[serde(default)]
    pub pending: bool,
}

/// Calls on a GPU that block, like a driver stuck on a GPU that fell off the bus.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HangSpec {
    /// Seconds after init from which calls block.
    #[serde(default)]
    pub after_s: f64,
    /// How long each call blocks.
    #[serde(deserialize_with = "non_negative_seconds")]
    pub block_s: f64,
    /// Only these query families block; empty means every call on the GPU.
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// Which running-process list a process shows in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessKind {
    #[default]
    Compute,
    Graphics,
    Both,
}

/// A process using a GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    pub pid: u32,
    #[serde(default, rename = "type")]
    pub kind: ProcessKind,
    /// Used GPU memory; absent means NVML reports it as not available.
    pub used_memory_mib: Option<Metric>,
    /// SM utilization in per-process samples; absent means no samples for this process.
    pub sm_percent: Option<Metric>,
    #[serde(default = "zero")]
    pub mem_percent: Metric,
    #[serde(default = "zero")]
    pub enc_percent: Metric,
    #[serde(default = "zero")]
    pub dec_percent: Metric,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
    #[serde(default)]
    pub present_from_s: f64,
    pub present_until_s: Option<f64>,
    /// Visibility in the process lists toggles every this many list calls on this GPU.
    pub flap_every: Option<u32>,
}

impl ProcessSpec {
    pub fn present_at(&self, t: f64) -> bool {
        within(t, self.present_from_s, self.present_until_s)
    }

    /// Whether the `call`-th list call (counted per GPU and list kind) shows this process.
    pub fn visible_on_call(&self, call: u64) -> bool {
        match self.flap_every {
            Some(n) if n > 0 => (call / u64::from(n)).is_multiple_of(2),
            _ => true,
        }
    }

    pub fn in_list(&self, graphics: bool) -> bool {
        match self.kind {
            ProcessKind::Both => true,
            ProcessKind::Compute => !graphics,
            ProcessKind::Graphics => graphics,
        }
    }
}

fn within(t: f64, from: f64, until: Option<f64>) -> bool {
    t >= from && until.is_none_or(|u| t < u)
}

fn zero() -> Metric {
    Metric::Const(0.0)
}

macro_rules! const_metric {
    ($($name:ident = $v:expr),* $(,)?) => {
        $(fn $name() -> Metric { Metric::Const($v) })*
    };
}

const_metric! {
    default_temperature = 35.0,
    default_power = 70.0,
    default_fan = 30.0,
    default_clock_graphics = 1755.0,
    default_clock_memory = 2619.0,
    default_clock_video = 1395.0,
}

/// One GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    #[serde(default = "default_name")]
    pub name: String,
    pub uuid: Option<String>,
    /// Long form, `00000000:18:00.0`.
    #[serde(default, deserialize_with = "bus_id")]
    pub bus_id: Option<(u32, u32, u32)>,
    #[serde(default = "default_pci_device_id")]
    pub pci_device_id: u32,
    #[serde(default = "default_memory_total")]
    pub memory_total_mib: u64,
    #[serde(default)]
    pub memory_reserved_mib: u64,
    pub minor_number: Option<u32>,
    #[serde(default = "default_power_limit")]
    pub power_limit_w: f64,
    pub enforced_power_limit_w: Option<f64>,
    #[serde(default = "default_temp_shutdown")]
    pub temperature_shutdown_c: u32,
    #[serde(default = "default_temp_slowdown")]
    pub temperature_slowdown_c: u32,
    #[serde(default = "default_temp_gpu_max")]
    pub temperature_gpu_max_c: u32,
    #[serde(default = "default_temp_mem_max")]
    pub temperature_mem_max_c: u32,
    #[serde(default = "default_max_graphics")]
    pub max_clock_graphics_mhz: u32,
    #[serde(default = "default_max_graphics")]
    pub max_clock_sm_mhz: u32,
    #[serde(default = "default_max_memory")]
    pub max_clock_memory_mhz: u32,
    #[serde(default = "default_max_video")]
    pub max_clock_video_mhz: u32,
    #[serde(default = "default_pcie_gen")]
    pub pcie_gen_max: u32,
    #[serde(default = "default_pcie_width")]
    pub pcie_width_max: u32,
    pub pcie_gen: Option<u32>,
    pub pcie_width: Option<u32>,
    #[serde(default = "default_num_fans")]
    pub num_fans: u32,
    #[serde(default = "yes")]
    pub persistence_mode: bool,
    #[serde(default)]
    pub compute_mode: u32,
    #[serde(default = "yes")]
    pub ecc_enabled: bool,
    /// Absent: `nvmlDeviceGetMigMode` is not supported.
    pub mig_mode: Option<bool>,
    #[serde(default)]
    pub display_active: bool,
    /// Seconds between per-process utilization samples.
    #[serde(
        default = "default_sample_interval",
        deserialize_with = "positive_seconds"
    )]
    pub sample_interval_s: f64,
    /// Report every metric as written, up to the C type's maximum: no clamp of percentages to
    /// 100, of the temperature to 200 °C, or of used memory to the total. A broken sensor or a
    /// faulty driver does report such values (4294967256 °C, a clock of 4294967291 MHz).
    #[serde(default)]
    pub unclamped: bool,

    #[serde(default = "zero")]
    pub utilization_gpu: Metric,
    #[serde(default = "zero")]
    pub utilization_memory: Metric,
    #[serde(default = "zero")]
    pub memory_used_mib: Metric,
    #[serde(default = "default_temperature")]
    pub temperature_c: Metric,
    #[serde(default = "default_power")]
    pub power_w: Metric,
    #[serde(default = "default_fan")]
    pub fan_percent: Metric,
    #[serde(default = "default_clock_graphics")]
    pub clock_graphics_mhz: Metric,
    #[serde(default = "default_clock_graphics")]
    pub clock_sm_mhz: Metric,
    #[serde(default = "default_clock_memory")]
    pub clock_memory_mhz: Metric,
    #[serde(default = "default_clock_video")]
    pub clock_video_mhz: Metric,
    #[serde(default = "zero")]
    pub pcie_rx_kbs: Metric,
    #[serde(default = "zero")]
    pub pcie_tx_kbs: Metric,
    #[serde(default = "zero")]
    pub encoder_percent: Metric,
    #[serde(default = "zero")]
    pub decoder_percent: Metric,
    #[serde(default = "zero")]
    pub pstate: Metric,
    #[serde(default = "zero")]
    pub throttle_reasons: Metric,
    #[serde(default = "zero")]
    pub ecc_corrected: Metric,
    #[serde(default = "zero")]
    pub ecc_uncorrected: Metric,
    /// Energy since the driver loaded, in mJ; without it the call is not supported.
    pub energy_mj: Option<Metric>,
    /// Remapped rows; without them the call is not supported (a pre-Ampere GPU).
    pub remapped_rows: Option<RemappedRowsSpec>,
    /// Xid errors this GPU raises, delivered through `nvmlEventSetWait` to event sets that
    /// registered for critical Xid errors before they happened.
    #[serde(default)]
    pub xid: Vec<XidSpec>,
    /// Retired pages; without them the calls are not supported (an Ampere or later GPU).
    pub retired_pages: Option<RetiredPagesSpec>,

    #[serde(default)]
    pub unsupported: Vec<Field>,
    #[serde(default)]
    pub present_from_s: f64,
    pub present_until_s: Option<f64>,
    pub lost_after_s: Option<f64>,
    pub hang: Option<HangSpec>,
    #[serde(default, rename = "process")]
    pub processes: Vec<ProcessSpec>,
    /// MIG devices (`[[gpu.mig]]`), with `mig_mode = true`.
    #[serde(default)]
    pub mig: Vec<crate::mig::MigSpec>,
}

impl GpuSpec {
    /// The largest value a metric may report: `usual`, or anything a `c_uint` holds when the
    /// GPU is `unclamped`.
    pub fn limit(&self, usual: u64) -> u64 {
        if self.unclamped {
            u64::from(u32::MAX)
        } else {
            usual
        }
    }
}

fn default_name() -> String {
    "NVIDIA H100 80GB HBM3".into()
}
fn default_pci_device_id() -> u32 {
    0x2330_10de
}
fn default_memory_total() -> u64 {
    81_559
}
fn default_power_limit() -> f64 {
    700.0
}
fn default_temp_shutdown() -> u32 {
    92
}
fn default_temp_slowdown() -> u32 {
    89
}
fn default_temp_gpu_max() -> u32 {
    87
}
fn default_temp_mem_max() -> u32 {
    95
}
fn default_max_graphics() -> u32 {
    1980
}
fn default_max_memory() -> u32 {
    2619
}
fn default_max_video() -> u32 {
    1755
}
fn default_pcie_gen() -> u32 {
    5
}
fn default_pcie_width() -> u32 {
    16
}
fn default_num_fans() -> u32 {
    1
}
fn default_sample_interval() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}

impl GpuSpec {
    pub fn present_at(&self, t: f64) -> bool {
        within(t, self.present_from_s, self.present_until_s)
    }

    pub fn lost_at(&self, t: f64) -> bool {
        self.lost_after_s.is_some_and(|after| t >= after)
    }

    pub fn supports(&self, field: Field) -> bool {
        !self.unsupported.contains(&field)
    }

    /// How long a call on `field` at time `t` blocks.
    pub fn block_for(&self, field: Field, t: f64) -> Option<f64> {
        let hang = self.hang.as_ref()?;
        let applies = hang.fields.is_empty() || hang.fields.contains(&field);
        (applies && t >= hang.after_s).then_some(hang.block_s)
    }

    pub fn uuid_at(&self, slot: usize) -> String {
        self.uuid.clone().unwrap_or_else(|| {
            let h = splitmix64(slot as u64 ^ 0x6e76_6d6c);
            format!(
                "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                h >> 32,
                (h >> 16) & 0xffff,
                h & 0xffff,
                slot & 0xffff,
                splitmix64(h) & 0xffff_ffff_ffff
            )
        })
    }

    /// `(domain, bus, device)` and the long bus id string.
    pub fn pci_address(&self, slot: usize) -> (u32, u32, u32, String) {
        let (domain, bus, device) = self
            .bus_id
            .unwrap_or((0, 0x18 + 0x10 * slot as u32 % 0xe0, 0));
        let long = format!("{domain:08X}:{bus:02X}:{device:02X}.0");
        (domain, bus, device, long)
    }

    pub fn enforced_power_limit(&self) -> f64 {
        self.enforced_power_limit_w.unwrap_or(self.power_limit_w)
    }
}

/// Parses `DDDDDDDD:BB:DD.F` (or the 4-digit-domain legacy form).
pub fn parse_bus_id(text: &str) -> Option<(u32, u32, u32)> {
    let (domain, rest) = text.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let device = rest.split_once('.').map_or(rest, |(d, _)| d);
    Some((
        u32::from_str_radix(domain, 16).ok()?,
        u32::from_str_radix(bus, 16).ok()?,
        u32::from_str_radix(device, 16).ok()?,
    ))
}

fn bus_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<(u32, u32, u32)>, D::Error> {
    let text = String::deserialize(d)?;
    parse_bus_id(&text).map(Some).ok_or_else(|| {
        de::Error::custom(format!(
            "bus_id `{text}` is not of the form 00000000:18:00.0"
        ))
    })
}

fn seconds<'de, D: Deserializer<'de>>(d: D, zero_ok: bool) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) {
        Ok(v)
    } else {
        let least = if zero_ok { ">= 0" } else { "> 0" };
        Err(de::Error::custom(format!(
            "expected a number of seconds {least}, found {v}"
        )))
    }
}

fn non_negative_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    seconds(d, true)
}

fn positive_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    seconds(d, false)
}

/// A metric: a constant, or a function of t (seconds since `nvmlInit`).
#[derive(Debug, Clone, PartialEq)]
pub enum Metric {
    Const(f64),
    Func(Func),
}

/// The time functions, written as an inline table tagged by `fn`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "fn", rename_all = "snake_case", deny_unknown_fields)]
pub enum Func {
    /// `mean + amplitude * sin(2π (t + phase_s) / period_s)`.
    Sine {
        mean: f64,
        amplitude: f64,
        period_s: f64,
        #[serde(default)]
        phase_s: f64,
    },
    /// From `from` to `to` over `duration_s` starting at `start_s`, then holds (or repeats).
    Ramp {
        from: f64,
        to: f64,
        duration_s: f64,
        #[serde(default)]
        start_s: f64,
        #[serde(default)]
        repeat: bool,
    },
    /// `high` for the first `duty` fraction of each period, `low` for the rest.
    Square {
        low: f64,
        high: f64,
        period_s: f64,
        #[serde(default = "half")]
        duty: f64,
    },
    /// Uniform in `mean ± amplitude`, a new value every `interval_s`, reproducible by `seed`.
    Noise {
        mean: f64,
        amplitude: f64,
        #[serde(default = "one")]
        interval_s: f64,
        #[serde(default)]
        seed: u64,
    },
}

fn half() -> f64 {
    0.5
}
fn one() -> f64 {
    1.0
}

impl Func {
    fn check(&self) -> Result<(), String> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "{name} must be a positive number of seconds, not {v}"
                ))
            }
        };
        match self {
            Func::Sine { period_s, .. } => positive("period_s", *period_s),
            Func::Ramp { duration_s, .. } => positive("duration_s", *duration_s),
            Func::Square { period_s, duty, .. } => {
                positive("period_s", *period_s)?;
                if (0.0..=1.0).contains(duty) {
                    Ok(())
                } else {
                    Err(format!("duty must be between 0 and 1, not {duty}"))
                }
            }
            Func::Noise { interval_s, .. } => positive("interval_s", *interval_s),
        }
    }
}

impl Metric {
    /// The value at `t` seconds after init, never negative.
    pub fn at(&self, t: f64) -> f64 {
        let v = match self {
            Metric::Const(v) => *v,
            Metric::Func(f) => f.at(t),
        };
        if v.is_finite() {
            v.max(0.0)
        } else {
            0.0
        }
    }

    /// The value as a whole number clamped to `[0, max]`.
    pub fn uint_at(&self, t: f64, max: u64) -> u64 {
        (self.at(t).round() as u64).min(max)
    }
}

impl Func {
    fn at(&self, t: f64) -> f64 {
        match *self {
            Func::Sine {
                mean,
                amplitude,
                period_s,
                phase_s,
            } => mean + amplitude * (std::f64::consts::TAU * (t + phase_s) / period_s).sin(),
            Func::Ramp {
                from,
                to,
                duration_s,
                start_s,
                repeat,
            } => {
                let mut x = ((t - start_s) / duration_s).max(0.0);
                x = if repeat { x.fract() } else { x.min(1.0) };
                from + (to - from) * x
            }
            Func::Square {
                low,
                high,
                period_s,
                duty,
            } => {
                if (t / period_s).fract() < duty {
                    high
                } else {
                    low
                }
            }
            Func::Noise {
                mean,
                amplitude,
                interval_s,
                seed,
            } => {
                let bucket = (t / interval_s).floor() as u64;
                let u = (splitmix64(seed ^ splitmix64(bucket)) >> 11) as f64 / (1u64 << 53) as f64;
                mean + amplitude * (2.0 * u - 1.0)
            }
        }
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<'de> Deserialize<'de> for Metric {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Metric;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a table such as { fn = \"sine\", mean = 50, amplitude = 20, period_s = 10 }")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Metric, E> {
                Ok(Metric::Const(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Metric, E> {
                Ok(Metric::Const(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Metric, E> {
                Ok(Metric::Const(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Metric, A::Error> {
                let func = Func::deserialize(de::value::MapAccessDeserializer::new(map))?;
                func.check().map_err(de::Error::custom)?;
                Ok(Metric::Func(func))
            }
        }
        d.deserialize_any(V)
    }
}

/// A scenario that failed to load, as a sentence naming the file and, for TOML errors, the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError(pub String);

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Scenario {
    /// The machine used when no scenario file is named: one plain idle GPU.
    pub fn default_machine() -> Self {
        let mut scenario = Self::parse("[[gpu]]\nname = \"Fake NVIDIA GPU (no scenario file)\"\n")
            .expect("the built-in scenario parses");
        scenario.gpus.truncate(1);
        scenario
    }

    /// Parses and validates scenario text. Errors are `line N: message`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let scenario: Scenario = toml::from_str(text).map_err(|e| describe_toml_error(text, &e))?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Reads and parses a scenario file; errors name the file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let prefix = format!("fake NVML: scenario {}", path.display());
        let text = std::fs::read_to_string(path)
            .map_err(|e| ScenarioError(format!("{prefix}: cannot read the file: {e}")))?;
        Self::parse(&text).map_err(|e| ScenarioError(format!("{prefix}: {e}")))
    }

    fn validate(&self) -> Result<(), String> {
        if self.gpus.len() > MAX_GPUS {
            return Err(format!(
                "{} GPUs declared, at most {MAX_GPUS} are supported",
                self.gpus.len()
            ));
        }
        for (index, gpu) in self.gpus.iter().enumerate() {
            crate::mig::validate(index, gpu)?;
        }
        Ok(())
    }
}

/// `line N: message` from a TOML error, with the line counted from the error's byte span.
fn describe_toml_error(text: &str, err: &toml::de::Error) -> String {
    let message = err.message().trim_end();
    match err.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line = text[..start].bytes().filter(|b| *b == b'\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_follow_their_functions() {
        let s = Scenario::parse(
            r#"
[[gpu]]
utilization_gpu = 42
temperature_c = { fn = "sine", mean = 50, amplitude = 10, period_s = 4 }
power_w = { fn = "ramp", from = 100, to = 300, duration_s = 10 }
fan_percent = { fn = "square", low = 20, high = 80, period_s = 2 }
pcie_rx_kbs = { fn = "noise", mean = 1000, amplitude = 100 }
"#,
        )
        .unwrap();
        let g = &s.gpus[0];
        assert_eq!(g.utilization_gpu.at(123.0), 42.0);
        assert!((g.temperature_c.at(1.0) - 60.0).abs() < 1e-9);
        assert!((g.temperature_c.at(3.0) - 40.0).abs() < 1e-9);
        assert!((g.power_w.at(5.0) - 200.0).abs() < 1e-9);
        assert_eq!(g.power_w.at(50.0), 300.0);
        assert_eq!(g.fan_percent.at(0.5), 80.0);
        assert_eq!(g.fan_percent.at(1.5), 20.0);
        let n1 = g.pcie_rx_kbs.at(0.2);
        assert_eq!(n1, g.pcie_rx_kbs.at(0.7), "noise holds within an interval");
        assert!((900.0..=1100.0).contains(&n1));
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err = Scenario::parse("[[gpu]]\nname = \"a\"\nutilization_gpu = = 3\n").unwrap_err();
        assert!(err.starts_with("line 3:"), "{err}");
    }

    #[test]
    fn semantic_errors_name_the_line() {
        let err = Scenario::parse(
            "[[gpu]]\nname = \"a\"\n\ntemperature_c = { fn = \"sine\", mean = 1, amplitude = 1, period_s = 0 }\n",
        )
        .unwrap_err();
        assert!(
            err.starts_with("line 4:") && err.contains("period_s"),
            "{err}"
        );
        let err = Scenario::parse("[[gpu]]\nunsupported = [\"fan\", \"fann\"]\n").unwrap_err();
        assert!(err.starts_with("line 2:") && err.contains("fann"), "{err}");
        let err = Scenario::parse("[init]\nfail = \"NOPE\"\n").unwrap_err();
        assert!(err.starts_with("line 2:") && err.contains("NOPE"), "{err}");
        let err = Scenario::parse("[[gpu]]\n\nbus_id = \"18:00\"\n").unwrap_err();
        assert!(
            err.starts_with("line 3:") && err.contains("bus_id"),
            "{err}"
        );
        let err = Scenario::parse("[[gpu]]\nhang = { block_s = -1 }\n").unwrap_err();
        assert!(
            err.starts_with("line 2:") && err.contains("seconds"),
            "{err}"
        );
        let err = Scenario::parse("[[gpu]]\ncolour = 1\n").unwrap_err();
        assert!(
            err.starts_with("line 2:") && err.contains("colour"),
            "{err}"
        );
    }

    #[test]
    fn time_origin_is_init_unless_wall() {
        assert_eq!(
            Scenario::parse("").unwrap().system.time_origin,
            TimeOrigin::Init
        );
        let s = Scenario::parse("[system]\ntime_origin = \"wall\"\n").unwrap();
        assert_eq!(s.system.time_origin, TimeOrigin::Wall);
        assert!(Scenario::parse("[system]\ntime_origin = \"boot\"\n").is_err());
    }

    #[test]
    fn flapping_process_toggles_by_call() {
        let s = Scenario::parse("[[gpu]]\n[[gpu.process]]\npid = 7\nflap_every = 2\n").unwrap();
        let p = &s.gpus[0].processes[0];
        let seen: Vec<bool> = (0..6).map(|c| p.visible_on_call(c)).collect();
        assert_eq!(seen, [true, true, false, false, true, true]);
    }

    #[test]
    fn bus_ids_parse_in_both_forms() {
        assert_eq!(parse_bus_id("00000000:18:00.0"), Some((0, 0x18, 0)));
        assert_eq!(parse_bus_id("0001:AB:1F.0"), Some((1, 0xab, 0x1f)));
        assert_eq!(parse_bus_id("nonsense"), None);
    }

    /// Replaces `{{pid:N}}` with 1000 + N, as the tests' template helper would with real pids.
    fn with_pids(template: &str) -> String {
        let mut out = String::new();
        let mut rest = template;
        while let Some(start) = rest.find("{{pid:") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 6..];
            let end = after.find("}}").unwrap();
            out.push_str(&(1000 + after[..end].parse::<u32>().unwrap()).to_string());
            rest = &after[end + 2..];
        }
        out + rest
    }

    #[test]
    fn every_fixture_parses_except_the_bad_one() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let text = with_pids(&std::fs::read_to_string(&path).unwrap());
            let parsed = Scenario::parse(&text);
            if path.ends_with("bad_scenario.toml") {
                let err = parsed.unwrap_err();
                assert!(err.starts_with("line 7:"), "{err}");
            } else {
                parsed.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            checked += 1;
        }
        assert!(
            checked >= 10,
            "only {checked} fixtures found in {}",
            dir.display()
        );
    }

    #[test]
    fn default_machine_has_one_gpu() {
        assert_eq!(Scenario::default_machine().gpus.len(), 1);
    }
}
