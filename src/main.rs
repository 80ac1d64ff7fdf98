//! The `torchtop` binary: parse the command line and hand over to the library.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use torchtop::app::App;
use torchtop::cli::{Cli, Command, OnceFormat};
use torchtop::collect::nvml_loader;
use torchtop::format::escape_lines;
use torchtop::report::StreamEnd;
use torchtop::sampler::{Sampler, SamplerConfig};

fn main() -> ExitCode {
    let cli = Cli::parse_args();
    if cli.print_config {
        return print_bytes(Ok(torchtop::settings::print_default().as_bytes().to_vec()));
    }
    if let Some(command) = &cli.command {
        return run_command(&cli, command);
    }
    let monitor = match load_config(&cli) {
        Ok(monitor) => monitor,
        Err(code) => return code,
    };
    let delay = monitor.delay(cli.delay_given.then_some(cli.delay), cli.delay);
    let config = sampler_config(&cli, delay, &monitor.config);
    let loader = nvml_loader(cli.nvml_lib.clone());
    if cli.once {
        return print_once(&cli, config, loader);
    }
    if cli.json {
        let filter = process_filter(&cli);
        return match torchtop::report::stream_json(config, loader, cli.samples, cli.compact, filter)
        {
            Ok(StreamEnd::Done) => exit_now(ExitCode::SUCCESS),
            Ok(StreamEnd::UnknownGpus(why)) => {
                complain("torchtop", &why);
                exit_now(ExitCode::from(2))
            }
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                exit_now(ExitCode::SUCCESS)
            }
            Err(error) => {
                complain("torchtop", &error);
                exit_now(ExitCode::FAILURE)
            }
        };
    }
    let mut ui = monitor.ui;
    ui.theme = cli.theme.unwrap_or(ui.theme);
    let app = App::new(delay, !cli.colors_disabled(), cli.readonly)
        .with_filters(cli.user.clone(), cli.gpus.clone().map(|g| g.0))
        .with_ui(ui, monitor.path, monitor.notice)
        .with_utc(cli.utc);
    match torchtop::event::run_tui(app, config, loader) {
        Ok(()) => exit_now(ExitCode::SUCCESS),
        Err(error) => {
            complain("torchtop", &error);
            exit_now(ExitCode::FAILURE)
        }
    }
}

/// The config file (`--config`, else the default one), read once: a pipe (`--config <(...)`)
/// can be read only once. Exit status 2 with a sentence when it cannot be used.
fn load_config(cli: &Cli) -> Result<torchtop::settings::MonitorConfig, ExitCode> {
    torchtop::settings::MonitorConfig::load(cli.config.as_deref()).map_err(|error| {
        complain("torchtop", &error);
        ExitCode::from(2)
    })
}

/// The sampler's settings: the interval and the library from the command line, the rules
/// from the config file.
fn sampler_config(cli: &Cli, delay: f64, file: &torchtop::settings::Config) -> SamplerConfig {
    let mut config = SamplerConfig::for_interval(
        Duration::from_secs_f64(delay),
        cli.nvml_lib.display().to_string(),
    );
    config.rules = file.rules.clone();
    config
}

/// `torchtop record`: headless, until the duration is over or a signal.
fn record(cli: &Cli, command: &Command) -> ExitCode {
    let Command::Record {
        output,
        delay,
        duration,
        max_size,
        json,
    } = command
    else {
        return ExitCode::FAILURE;
    };
    let delay = delay.unwrap_or(cli.delay);
    let config = match load_config(cli) {
        Ok(monitor) => sampler_config(cli, delay, &monitor.config),
        Err(code) => return code,
    };
    let options = torchtop::record::headless::HeadlessOptions {
        record: torchtop::record::RecordOptions {
            path: output
                .clone()
                .unwrap_or_else(torchtop::record::headless::default_file_name),
            max_size: *max_size,
            interval_seconds: delay,
        },
        duration: *duration,
        json: *json,
        utc: cli.utc,
    };
    let loader = nvml_loader(cli.nvml_lib.clone());
    match torchtop::record::headless::run(options, config, loader) {
        Ok(recorded) => {
            tell(&format!("torchtop record: {recorded}"));
            exit_now(ExitCode::SUCCESS)
        }
        Err(error) => {
            complain("torchtop record", &error);
            exit_now(ExitCode::FAILURE)
        }
    }
}

/// `torchtop replay`: the TUI, `--json` or `--summary`.
fn replay(cli: &Cli, command: &Command) -> ExitCode {
    let Command::Replay {
        file,
        demo,
        json,
        summary,
        from,
        to,
        speed,
    } = command
    else {
        return ExitCode::FAILURE;
    };
    let options = torchtop::replay::ReplayOptions {
        file: file.clone(),
        demo: *demo,
        json: *json,
        summary: *summary,
        from: from.clone(),
        to: to.clone(),
        speed: *speed,
        colors: !cli.colors_disabled(),
        utc: cli.utc,
    };
    let tui = match torchtop::replay::run(options) {
        Ok(Some(tui)) => tui,
        Ok(None) => return exit_now(ExitCode::SUCCESS),
        Err(error) => {
            complain("torchtop replay", &error);
            let usage = matches!(error, torchtop::replay::ReplayError::Usage(_));
            return exit_now(ExitCode::from(if usage { 2 } else { 1 }));
        }
    };
    match torchtop::event::run_replay(tui) {
        Ok(()) => exit_now(ExitCode::SUCCESS),
        Err(error) => {
            complain("torchtop replay", &format!("the replay failed: {error}"));
            exit_now(ExitCode::FAILURE)
        }
    }
}

/// `--user` and `--gpus`, which `--once` and `--json` apply as the monitor's table does.
fn process_filter(cli: &Cli) -> torchtop::report::ProcessFilter {
    torchtop::report::ProcessFilter {
        user: cli.user.clone(),
        gpus: cli.gpus.clone().map(|g| g.0),
    }
}

fn print_once(cli: &Cli, config: SamplerConfig, loader: torchtop::sampler::GpuLoader) -> ExitCode {
    let mut snapshot = Sampler::start(config, loader).once(
        Duration::from_secs_f64(cli.timeout),
        Duration::from_millis(40),
    );
    let filter = process_filter(cli);
    if let Some(why) = filter.unknown_gpus(&snapshot) {
        complain("torchtop", &why);
        return exit_now(ExitCode::from(2));
    }
    // The exit status follows the whole machine's warnings, whatever the filter shows; the
    // exposition says them as series and exits 0, so that a textfile collector's
    // `... > x.tmp && mv x.tmp x.prom` keeps the file fresh while something is critical.
    let prometheus = cli.format == Some(OnceFormat::Prometheus);
    let fail_at = cli.fail_on.threshold().filter(|_| !prometheus);
    let status = torchtop::report::exit_status(&snapshot, fail_at);
    filter.apply(&mut snapshot);
    let out = if prometheus {
        // TORCHTOP_HOSTNAME, as `serve` reads it: one machine, one name in both.
        let host = torchtop::serve::hostname_from_env();
        torchtop::serve::exposition_text(&snapshot, host.as_deref())
    } else if cli.json || cli.format == Some(OnceFormat::Json) {
        torchtop::report::json(&snapshot)
    } else {
        let columns = std::io::stdout()
            .is_terminal()
            .then(|| crossterm::terminal::size().ok())
            .flatten()
            .map(|(columns, _)| usize::from(columns));
        let mut text = torchtop::report::text_within(&snapshot, columns);
        if let Some(note) = filter.note() {
            text.push_str(&note);
        }
        text
    };
    let printed = print_bytes(Ok(format!("{}\n", out.trim_end()).into_bytes()));
    if printed != ExitCode::SUCCESS {
        return exit_now(printed);
    }
    exit_now(ExitCode::from(status))
}

fn run_command(cli: &Cli, command: &Command) -> ExitCode {
    match command {
        Command::Serve(args) => torchtop::serve::main(&cli.globals(), args),
        Command::Cluster(args) => torchtop::cluster::main(&cli.globals(), args),
        Command::Record { .. } => record(cli, command),
        Command::Replay { .. } => replay(cli, command),
        Command::Run {
            command,
            record_history,
        } => match torchtop::launch::run(command, *record_history) {
            Ok(never) => match never {},
            Err(error) => {
                complain("torchtop run", &error);
                ExitCode::from(127)
            }
        },
        #[cfg(feature = "torch")]
        Command::Demo { steps } => match torchtop::agent::demo::demo(*steps) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                complain("torchtop demo", &error);
                ExitCode::FAILURE
            }
        },
        Command::Snapshot(args) => torchtop::memsnap::cli::run(args),
        Command::Attach { pid } => match torchtop::launch::attach(*pid) {
            Ok(message) => print_bytes(Ok(format!("{}\n", escape_lines(&message)).into_bytes())),
            Err(error) => {
                complain("torchtop attach", &error);
                ExitCode::FAILURE
            }
        },
        Command::Completions { shell } => print_bytes(Ok(torchtop::cli::completions(*shell))),
        Command::Man { subcommand } => match torchtop::cli::man_page(subcommand.as_deref()) {
            Ok(page) => print_bytes(Ok(page)),
            Err(error) => {
                complain("torchtop man", &error);
                ExitCode::from(2)
            }
        },
    }
}

/// Writes a generated script or page to stdout; a reader that closed the pipe early (`| head`)
/// is not an error.
fn print_bytes(bytes: std::io::Result<Vec<u8>>) -> ExitCode {
    use std::io::Write;
    let written = bytes.and_then(|bytes| {
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes)?;
        out.flush()
    });
    match written {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            complain("torchtop", &error);
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

/// Prints an error on stderr. Errors quote paths, command lines and tools' output that other
/// users control, so every line goes through the one escaping function.
fn complain(prefix: &str, error: &dyn std::fmt::Display) {
    tell(&format!("{prefix}: {}", escape_lines(&error.to_string())));
}

/// One line on stderr, or nothing where stderr is closed: `eprintln!` panics there, and a
/// recording stopped cleanly by SIGTERM exited 101 when its stderr pipe had gone.
fn tell(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Leaves without waiting for collector threads, which may be stuck in the driver. Keeps the
/// codes `--once` documents (0, 3, 4); any other failure is 1.
fn exit_now(code: ExitCode) -> ExitCode {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let status = [
        0u8,
        1,
        2,
        torchtop::report::EXIT_WARN,
        torchtop::report::EXIT_CRITICAL,
    ]
    .into_iter()
    .find(|c| ExitCode::from(*c) == code)
    .map_or(1, i32::from);
    std::process::exit(status)
}
