//! `torchtop demo`: a small tch training loop with the agent started, so a user sees the
//! allocator panel work without Python. An MLP learns a random linear map on synthetic data, on
//! GPU 0 when CUDA is available and on the CPU otherwise.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Reduction, Tensor};

use super::libtorch::LibtorchSource;

const INPUTS: i64 = 512;
/// Hidden width on a GPU; the CPU gets a narrower net so the demo still moves along.
const HIDDEN_CUDA: i64 = 2048;
const HIDDEN_CPU: i64 = 256;
const OUTPUTS: i64 = 64;
const BATCH: i64 = 256;
/// A progress line every this many steps.
const REPORT_EVERY: u64 = 50;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Runs the demo for `steps` steps, or until Ctrl-C when None.
pub fn demo(steps: Option<u64>) -> Result<(), String> {
    match super::start() {
        Some(path) => println!("torchtop agent listening on {}", path.display()),
        None => println!("torchtop agent did not start (see above); training anyway"),
    }
    catch_interrupts();
    let device = if tch::Cuda::is_available() {
        Device::Cuda(0)
    } else {
        Device::Cpu
    };
    let hidden = if device.is_cuda() {
        HIDDEN_CUDA
    } else {
        HIDDEN_CPU
    };
    println!(
        "training an MLP ({INPUTS}-{hidden}-{hidden}-{OUTPUTS}, batch {BATCH}) on {}",
        describe(device)
    );
    let outcome = train(device, hidden, steps);
    super::stop();
    outcome
}

fn train(device: Device, hidden: i64, steps: Option<u64>) -> Result<(), String> {
    tch::manual_seed(0);
    let vs = nn::VarStore::new(device);
    let root = vs.root();
    let net = nn::seq()
        .add(nn::linear(
            &root / "l1",
            INPUTS,
            hidden,
            nn::LinearConfig::default(),
        ))
        .add_fn(tch::Tensor::relu)
        .add(nn::linear(
            &root / "l2",
            hidden,
            hidden,
            nn::LinearConfig::default(),
        ))
        .add_fn(tch::Tensor::relu)
        .add(nn::linear(
            &root / "l3",
            hidden,
            OUTPUTS,
            nn::LinearConfig::default(),
        ));
    let mut optimizer = nn::Adam::default()
        .build(&vs, 1e-3)
        .map_err(|e| format!("cannot build the optimizer: {e}"))?;
    let target_map =
        Tensor::randn([INPUTS, OUTPUTS], (Kind::Float, device)) / (INPUTS as f64).sqrt();
    let started = Instant::now();
    let mut step = 0u64;
    while steps.is_none_or(|limit| step < limit) && !INTERRUPTED.load(Ordering::SeqCst) {
        let inputs = Tensor::randn([BATCH, INPUTS], (Kind::Float, device));
        let targets = inputs.matmul(&target_map);
        let loss = net
            .forward(&inputs)
            .f_mse_loss(&targets, Reduction::Mean)
            .map_err(|e| format!("step {step}: {e}"))?;
        optimizer.backward_step(&loss);
        super::step();
        step += 1;
        if step % REPORT_EVERY == 0 || steps == Some(step) {
            let loss = loss
                .f_double_value(&[])
                .map_err(|e| format!("step {step}: {e}"))?;
            println!("{}", progress_line(step, loss, started.elapsed(), device));
        }
    }
    Ok(())
}

fn progress_line(step: u64, loss: f64, elapsed: Duration, device: Device) -> String {
    let rate = step as f64 / elapsed.as_secs_f64().max(1e-9);
    let mut line = format!("step {step:>6}  loss {loss:.5}  {rate:.1} steps/s");
    if let Device::Cuda(index) = device {
        let memory = u32::try_from(index)
            .ok()
            .and_then(LibtorchSource::raw_device_stats);
        match memory {
            Some(stats) => line.push_str(&format!(
                "  allocated {}  reserved {}",
                mib(stats.allocated_bytes[0]),
                mib(stats.reserved_bytes[0])
            )),
            None => line.push_str("  allocated N/A  reserved N/A"),
        }
    }
    line
}

fn mib(bytes: i64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn describe(device: Device) -> String {
    match device {
        Device::Cuda(index) => format!("CUDA device {index}"),
        _ => "the CPU (no CUDA device available)".into(),
    }
}

/// Ctrl-C ends the loop cleanly, so the agent removes its socket on the way out. SIGTERM is left
/// to the agent, as in a program that does not handle it: the socket goes and the demo dies of it.
fn catch_interrupts() {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
    }
}
