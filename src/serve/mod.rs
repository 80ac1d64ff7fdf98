//! `torchtop serve`: a Prometheus exporter. The sampler runs headless on its own threads, as
//! under the monitor; the newest snapshot waits in a watch channel, and each scrape of
//! `/metrics` encodes it. A scrape never calls NVML, so a hung GPU never blocks one: it is
//! exported as stale (`torchtop_gpu_state{state="stale"} 1`) and its DCGM series stop.
//!
//! - [`exposition`]: families to text, and the format a scraper asked for;
//! - [`dcgm`]: the GPU families under dcgm-exporter's names and labels;
//! - [`torchtop`]: processes, host, warnings and the exporter's own figures;
//! - [`agent`]: the allocator and steps of every process with an agent, GPU or not;
//! - [`webconfig`]: TLS and basic auth from an exporter-toolkit web config;
//! - [`http`]: the server.
//!
//! `torchtop --once --format prometheus` prints the same exposition through [`exposition_text`].

mod agent;
mod connections;
mod dcgm;
pub mod exposition;
mod http;
mod listen;
mod mig;
pub(crate) mod torchtop;
mod webconfig;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::collect::nvml_loader;
use crate::model::Snapshot;
use crate::sampler::{self, GpuLoader, SamplerConfig};
use crate::settings::Globals;
use exposition::Format;
use torchtop::OwnFigures;

/// The port dcgm-exporter uses; torchtop takes its place when dcgm-exporter is not there.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:9400";

/// `torchtop serve` options.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on: IP:PORT, :PORT (every interface), or a host name and a port.
    /// Anything other than loopback must be given explicitly; port 0 picks a free port (the
    /// address is printed on stderr).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN,
          value_parser = listen::parse_listen)]
    pub(crate) listen: SocketAddr,

    /// TLS and basic auth, in the format of Prometheus' exporter-toolkit.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub(crate) web_config: Option<PathBuf>,

    /// Also export command lines and launcher variables (they can hold secrets).
    #[arg(long)]
    pub(crate) expose_commands: bool,

    /// The `Hostname` label (default: this machine's hostname).
    #[arg(long, value_name = "NAME", env = HOSTNAME_ENV)]
    pub(crate) hostname: Option<String>,

    /// Sampling interval in seconds (0.1 to 86400; default: the monitor's -d, 1).
    #[arg(short = 'd', long = "delay", value_name = "SECONDS",
          value_parser = crate::settings::parse_delay)]
    pub(crate) delay: Option<f64>,
}

/// The variable that names the `Hostname` label: `serve`'s `--hostname`, and the only way to
/// name it for `--once --format prometheus`.
pub const HOSTNAME_ENV: &str = "TORCHTOP_HOSTNAME";

/// The `Hostname` label [`HOSTNAME_ENV`] names, where it is set and not empty, for
/// `--once --format prometheus`: the series of one machine carry the name `serve` gives them
/// (a review saw the textfile's series labelled with the machine's own name instead).
pub fn hostname_from_env() -> Option<String> {
    std::env::var(HOSTNAME_ENV)
        .ok()
        .filter(|name| !name.is_empty())
}

/// The exposition of one snapshot in Prometheus' text format, for node exporter's textfile
/// collector (`torchtop --once --format prometheus`).
pub fn exposition_text(snapshot: &Snapshot, hostname: Option<&str>) -> String {
    encode_with_timing(
        snapshot,
        hostname,
        false,
        Format::Prometheus,
        OwnFigures::default(),
        Instant::now(),
    )
}

/// What a scrape of `/metrics` answers for `snapshot`: every family, in `format`, with the
/// exporter's own figures (the snapshot's age is measured now).
pub fn encode(
    snapshot: &Snapshot,
    hostname: Option<&str>,
    expose_commands: bool,
    format: Format,
) -> String {
    let started = Instant::now();
    encode_with_timing(
        snapshot,
        hostname,
        expose_commands,
        format,
        OwnFigures::at_scrape(snapshot),
        started,
    )
}

/// Every family of `snapshot` in `format`; `own.scrape_seconds` is measured from `started`.
fn encode_with_timing(
    snapshot: &Snapshot,
    hostname: Option<&str>,
    expose_commands: bool,
    format: Format,
    mut own: OwnFigures,
    started: Instant,
) -> String {
    let host = hostname
        .or(snapshot.host.hostname.as_deref())
        .unwrap_or("localhost");
    let mut families = dcgm::families(snapshot, host);
    if own.sample_age_seconds.is_some() {
        own.scrape_seconds = Some(started.elapsed().as_secs_f64());
    }
    families.extend(torchtop::families(snapshot, host, expose_commands, own));
    exposition::encode(families, format)
}

/// Runs `torchtop serve` until SIGTERM or SIGINT.
pub fn main(globals: &Globals, args: &ServeArgs) -> ExitCode {
    // `--config`, else the default file when there is one, as the monitor and `--once` read
    // it: alerts built on `serve` must judge as they do.
    let rules = match crate::settings::MonitorConfig::load(globals.config.as_deref()) {
        Ok(monitor) => monitor.config.rules,
        Err(error) => {
            say!("torchtop serve: {error}");
            return ExitCode::from(2);
        }
    };
    let mut config = SamplerConfig::for_interval(
        Duration::from_secs_f64(args.delay.unwrap_or(globals.delay)),
        globals.nvml_lib.display().to_string(),
    );
    config.rules = rules;
    // A web config that cannot be used is a bad config file: a usage error, as `--config` is.
    let web = match &args.web_config {
        Some(path) => match webconfig::load(path) {
            Ok(web) => web,
            Err(error) => {
                say!("torchtop serve: {error}");
                return ExitCode::from(2);
            }
        },
        None => webconfig::WebConfig::default(),
    };
    match run(args, web, config, nvml_loader(globals.nvml_lib.clone())) {
        Ok(()) => exit_now(0),
        Err(error) => {
            say!("torchtop serve: {error}");
            exit_now(1)
        }
    }
}

/// Leaves without joining the sampler's threads, which may be stuck in the driver.
fn exit_now(code: i32) -> ! {
    std::process::exit(code)
}

fn run(
    args: &ServeArgs,
    web: webconfig::WebConfig,
    config: SamplerConfig,
    loader: GpuLoader,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let listener = TcpListener::bind(args.listen).await.map_err(|e| {
            format!(
                "cannot listen on {}: {e}; choose another address with --listen",
                args.listen
            )
        })?;
        let address = listener
            .local_addr()
            .map_err(|e| format!("cannot read the listening address: {e}"))?;
        let scheme = if web.tls.is_some() { "https" } else { "http" };
        say!("torchtop serve: listening on {scheme}://{address}/metrics");
        let (snapshots_tx, snapshots) = watch::channel(None);
        // Kept alive for as long as we serve: the sampler paces itself by waiting on it.
        let mut driver_told = None;
        let _requests = sampler::spawn_shared_loop(config, loader, move |snapshot| {
            if let Some(news) = crate::model::gpu::driver_news(&mut driver_told, &snapshot.driver) {
                say!("torchtop serve: {}", crate::format::escape(&news));
            }
            snapshots_tx.send(Some(snapshot)).is_ok()
        });
        let shared = Arc::new(http::Shared {
            snapshots,
            hostname: args.hostname.clone(),
            expose_commands: args.expose_commands,
            auth: web.auth.clone(),
        });
        let mut terminate =
            signal(SignalKind::terminate()).map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
        let mut interrupt =
            signal(SignalKind::interrupt()).map_err(|e| format!("cannot watch SIGINT: {e}"))?;
        tokio::select! {
            () = http::accept_loop(listener, shared, web) => {}
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        Ok(())
    })
}
