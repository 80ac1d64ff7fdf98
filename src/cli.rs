//! Command-line arguments.

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

/// What `--version` prints after the name: the version, the git commit and the cargo features
/// built in (`0.1.0 (commit abc1234, features: none)`), written by the build script.
pub const LONG_VERSION: &str = env!("TORCHTOP_LONG_VERSION");

/// The default NVML library: the one the dynamic loader finds, as the driver installs it.
pub const DEFAULT_NVML_LIB: &str = "libnvidia-ml.so.1";

#[derive(Debug, Clone, Parser)]
#[command(
    name = "torchtop",
    version = LONG_VERSION,
    // "-d -1" is a bad value, worth its range sentence, not an unknown option.
    allow_negative_numbers = true,
    about = "GPU, process, host and PyTorch-allocator monitor for training machines"
)]
pub struct Cli {
    /// Refresh interval in seconds (0.1 to 86400).
    #[arg(short = 'd', long = "delay", value_name = "SECONDS", default_value_t = 1.0,
          value_parser = parse_delay)]
    pub delay: f64,

    /// The NVML library file to load.
    #[arg(long = "nvml-lib", value_name = "PATH", env = "TORCHTOP_NVML_LIB",
          default_value = DEFAULT_NVML_LIB)]
    pub nvml_lib: PathBuf,

    /// Print one summary and exit, without a terminal UI.
    #[arg(long)]
    pub once: bool,

    /// Print JSON instead of drawing: one document with --once, else one line per refresh.
    #[arg(long)]
    pub json: bool,

    /// With --json (and no --once): stop after this many documents.
    #[arg(long, value_name = "N", requires = "json", conflicts_with = "once",
          value_parser = parse_samples)]
    pub samples: Option<u64>,

    /// How long --once waits for a GPU (or the driver) before reporting it as stale
    /// (0.01 to 86400 seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = parse_timeout)]
    pub timeout: f64,

    /// Turn off every key that acts on a process (signals, renice, the agent's snapshots and
    /// memory history); recording and saving the settings stay.
    // A flag that takes no value: an optional one swallowed the subcommand after it
    // (`--readonly replay --demo`). TORCHTOP_READONLY's value says yes (1, true, yes, on) or
    // no (0, false, no, off).
    #[arg(long, env = "TORCHTOP_READONLY", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub readonly: bool,

    /// With --once: which warnings make the exit status non-zero: `critical` (the default) exits
    /// 4 while a critical warning holds, `warn` also exits 3 for a warning at warn level,
    /// `never` always exits 0. Usage errors exit 2.
    #[arg(
        long,
        value_enum,
        value_name = "LEVEL",
        default_value = "critical",
        requires = "once"
    )]
    pub fail_on: FailOn,

    /// With --json (and no --once): leave out of each line what earlier lines said (nulls, fixed
    /// GPU and process fields, the prose of warnings already shown).
    #[arg(long, requires = "json", conflicts_with = "once")]
    pub compact: bool,

    /// With --once: the output format (`prometheus` is the exporter's text, for node
    /// exporter's textfile collector).
    #[arg(long, value_enum, value_name = "FORMAT", requires = "once")]
    pub format: Option<OnceFormat>,

    /// A TOML config file with rule thresholds.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Print the default config and exit.
    #[arg(long)]
    pub print_config: bool,

    /// Draw without colours (also when NO_COLOR is set).
    #[arg(long)]
    pub no_color: bool,

    /// The colour theme: dark, light or mono (F2 changes and saves it).
    #[arg(long, value_name = "THEME", value_parser = parse_theme)]
    pub theme: Option<crate::config::ThemeName>,

    /// Whether --delay was on the command line (set by [`Cli::parse_args`]); otherwise the
    /// refresh rate saved by the setup screen applies.
    #[arg(skip)]
    pub delay_given: bool,

    /// Show only this user's processes (`u` changes it in the monitor): a login name, or a uid
    /// for a user without one here.
    #[arg(long, value_name = "NAME", value_parser = parse_user)]
    pub user: Option<String>,

    /// Show only the processes on these GPUs, by NVML index: `--gpus 0,3`.
    #[arg(long, value_name = "LIST", value_parser = parse_gpu_list)]
    pub gpus: Option<GpuList>,

    /// Show the monitor's clock in UTC; it shows local time (as TZ says) by default.
    #[arg(long)]
    pub utc: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

// Shared with `torchtop cluster --once`, which cannot reach this module.
pub use crate::settings::FailOn;

/// What `--once` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnceFormat {
    Text,
    Json,
    Prometheus,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Export GPUs, processes and the allocator to Prometheus (dcgm-exporter's GPU names).
    /// Options of the monitor (--config, --nvml-lib) go before `serve`.
    Serve(crate::serve::ServeArgs),
    /// A view of many machines, read from Prometheus.
    Cluster(crate::cluster::ClusterArgs),
    /// Run a command with the torchtop agent started in every Python process it launches.
    Run {
        /// Record PyTorch memory history (allocation stacks) from the program's first CUDA
        /// allocation, so that an out-of-memory error writes a snapshot with its stacks.
        #[arg(long)]
        record_history: bool,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<String>,
    },
    /// Open a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot): who holds the memory.
    Snapshot(crate::memsnap::cli::SnapshotArgs),
    /// Start the agent inside a running Python process.
    Attach {
        /// The process id.
        pid: u32,
    },
    /// Record what the monitor sees to a file, without a terminal (systemd, tmux, nohup).
    /// Options of the monitor (--config, --nvml-lib) go before `record`.
    #[command(allow_negative_numbers = true)]
    Record {
        /// The file to write (default: torchtop-DATE-TIME.ttrec here). An earlier recording of
        /// that name is moved to FILE.1.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
        /// Refresh interval in seconds (0.1 to 86400; default: the monitor's -d, 1).
        #[arg(short = 'd', long = "delay", value_name = "SECONDS", value_parser = parse_delay)]
        delay: Option<f64>,
        /// Stop after this long: 90s, 10m, 8h, 2d (default: until SIGINT, SIGTERM or SIGHUP).
        #[arg(long, value_name = "D", allow_hyphen_values = true,
              value_parser = crate::record::headless::parse_duration)]
        duration: Option<std::time::Duration>,
        /// Keep the recording's files under this size in all (500M, 2G): FILE moves on to
        /// FILE.1 at a quarter of it, and the oldest numbered files go while they take more
        /// than three quarters.
        #[arg(long = "max-size", value_name = "SIZE",
              value_parser = crate::record::headless::parse_size)]
        max_size: Option<u64>,
        /// Also print each snapshot as a JSON line on stdout, as `torchtop --json` does.
        #[arg(long)]
        json: bool,
    },
    /// Replay a recording in the monitor's TUI, or export it (--json, --summary).
    Replay {
        /// The recording to replay.
        #[arg(value_name = "FILE", required_unless_present = "demo")]
        file: Option<PathBuf>,
        /// Play the demo recording: an 8-GPU job that fragments, leaks, straggles and hits OOM.
        #[arg(long, conflicts_with = "file")]
        demo: bool,
        /// Print the snapshots as JSON lines (schema 1, as `torchtop --json` printed them).
        #[arg(long, conflicts_with = "summary")]
        json: bool,
        /// Print what happened: peaks, warnings, OOMs, processes that came and went.
        #[arg(long)]
        summary: bool,
        /// Start at T: 02:15 or 02:15:30 (local time, UTC under `torchtop --utc replay`, on the
        /// day that puts it within the recording), +10m from the start, -5m from the end, RFC 3339.
        #[arg(long, value_name = "T", allow_hyphen_values = true)]
        from: Option<String>,
        /// Stop at T (with --json or --summary), written as for --from.
        #[arg(long, value_name = "T", allow_hyphen_values = true)]
        to: Option<String>,
        /// Playback speed: 0.25, 0.5, 1, 2, 4 ... 128 (default 1; the demo plays at 16).
        #[arg(long, value_name = "X", value_parser = crate::replay::player::parse_speed)]
        speed: Option<f64>,
    },
    /// Train a small MLP with tch (libtorch) and the agent started: the allocator panel
    /// without Python. On GPU 0 when CUDA is available, else on the CPU.
    #[cfg(feature = "torch")]
    Demo {
        /// Stop after this many steps (default: run until Ctrl-C).
        #[arg(long, value_name = "N")]
        steps: Option<u64>,
    },
    /// Print a shell completion script: `torchtop completions bash > /etc/bash_completion.d/torchtop`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `torchtop man | man -l -`; `torchtop man serve` prints
    /// torchtop-serve(1).
    Man {
        /// A subcommand whose page to print instead of torchtop(1).
        #[arg(value_name = "SUBCOMMAND")]
        subcommand: Option<String>,
    },
}

fn parse_theme(text: &str) -> Result<crate::config::ThemeName, String> {
    use crate::config::ThemeName;
    ThemeName::ALL
        .into_iter()
        .find(|t| t.name() == text)
        .ok_or_else(|| format!("the theme must be dark, light or mono, not {text:?}"))
}

pub use crate::settings::MAX_SECONDS;
use crate::settings::{parse_delay, parse_seconds};

/// A login name the passwd database knows (as htop's `-u` insists), or a number: a uid without
/// a name here, as processes of a container's users show.
fn parse_user(text: &str) -> Result<String, String> {
    let uid = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    // Rows name their user by login name where the uid has one, so a uid (from `squeue -o
    // %U`, SLURM_JOB_UID) is taken as that name: `--user 1000` matched nothing beside a
    // user named for 1000. A uid without a name is one, as rows show it.
    let named = uid
        .then(|| text.parse().ok().and_then(crate::sys::user_name))
        .flatten();
    if let Some(name) = named {
        Ok(name)
    } else if uid || crate::sys::user_exists(text) {
        Ok(text.to_string())
    } else {
        Err(format!(
            "no user is named {} on this machine (give a login name or a uid)",
            crate::format::escape(text)
        ))
    }
}

/// The GPU indices of `--gpus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuList(pub Vec<u32>);

/// "0,3" or "0, 3": GPU indices separated by commas, or a sentence saying what is wrong.
fn parse_gpu_list(text: &str) -> Result<GpuList, String> {
    let mut gpus = Vec::new();
    for word in text.split(',') {
        let word = word.trim();
        let index = word.parse::<u32>().map_err(|_| {
            format!(
                "'{}' is not a GPU index: give indices separated by commas, as in --gpus 0,3",
                crate::format::escape(word)
            )
        })?;
        if !gpus.contains(&index) {
            gpus.push(index);
        }
    }
    Ok(GpuList(gpus))
}

/// `--samples`: a whole number of documents, at least one.
fn parse_samples(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "expected a whole number of documents, at least 1, not {}",
            crate::format::escape(text)
        )),
    }
}

fn parse_timeout(text: &str) -> Result<f64, String> {
    parse_seconds(text, "timeout", 0.01)
}

impl Cli {
    /// Parses the process's arguments as `Cli::parse` does, noting whether --delay was given.
    /// An environment variable set but empty counts as unset (see [`without_empty_env`]).
    pub fn parse_args() -> Cli {
        let is_empty =
            |name: &std::ffi::OsStr| std::env::var_os(name).is_some_and(|v| v.is_empty());
        let command = without_empty_env(Cli::command(), &is_empty);
        Cli::from_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
    }

    fn from_matches(matches: &clap::ArgMatches) -> Result<Cli, clap::Error> {
        use clap::FromArgMatches;
        let mut cli = Cli::from_arg_matches(matches)?;
        cli.delay_given =
            matches.value_source("delay") == Some(clap::parser::ValueSource::CommandLine);
        Ok(cli)
    }

    /// Whether colours are off: the flag, or a non-empty NO_COLOR (see no-color.org).
    pub fn colors_disabled(&self) -> bool {
        self.no_color || std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
    }

    /// The flags every command shares.
    pub fn globals(&self) -> crate::settings::Globals {
        crate::settings::Globals {
            config: self.config.clone(),
            delay: self.delay,
            nvml_lib: self.nvml_lib.clone(),
            colors: !self.colors_disabled(),
        }
    }
}

/// `command` with the environment variables its arguments (and its subcommands') read left
/// unread where `is_empty` says they are set but empty: `TORCHTOP_NVML_LIB=` means unset, as
/// `NO_COLOR=` does, not a flag given no value (a review: "a value is required for
/// '--nvml-lib `<PATH>`'", a flag never typed).
fn without_empty_env(
    mut command: clap::Command,
    is_empty: &dyn Fn(&std::ffi::OsStr) -> bool,
) -> clap::Command {
    let empty: Vec<clap::Id> = (command.get_arguments())
        .filter(|arg| arg.get_env().is_some_and(is_empty))
        .map(|arg| arg.get_id().clone())
        .collect();
    for id in empty {
        command = command.mut_arg(id, |arg| arg.env(None::<&'static str>));
    }
    let subcommands: Vec<String> = (command.get_subcommands())
        .map(|sub| sub.get_name().to_string())
        .collect();
    for name in subcommands {
        command = command.mut_subcommand(name, |sub| without_empty_env(sub, is_empty));
    }
    command
}

/// The completion script for `shell`, generated from the argument definitions above.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut script = Vec::new();
    // Into memory, not stdout: clap_complete panics when its writer fails (a closed pipe).
    clap_complete::generate(shell, &mut Cli::command(), "torchtop", &mut script);
    script
}

/// The man page (section 1, roff) of torchtop, or of one subcommand (`torchtop-serve(1)`, the
/// name torchtop(1) refers to it by), generated from the argument definitions above.
pub fn man_page(subcommand: Option<&str>) -> Result<Vec<u8>, String> {
    let mut command = Cli::command();
    command.build();
    if let Some(name) = subcommand {
        // clap's own `help` subcommand has no page of its own.
        let pages = || command.get_subcommands().filter(|c| c.get_name() != "help");
        let Some(sub) = pages().find(|c| c.get_name() == name) else {
            let names: Vec<&str> = pages().map(clap::Command::get_name).collect();
            return Err(format!(
                "there is no subcommand '{}'; the pages are: {}",
                crate::format::escape(name),
                names.join(", ")
            ));
        };
        command = sub
            .clone()
            .name(format!("torchtop-{name}"))
            .bin_name(format!("torchtop {name}"))
            .version(LONG_VERSION);
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .map_err(|e| format!("the man page could not be written: {e}"))?;
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        use clap::CommandFactory;
        let matches = Cli::command().try_get_matches_from(args).unwrap();
        Cli::from_matches(&matches).unwrap()
    }

    #[test]
    fn theme_and_whether_the_delay_was_given() {
        use crate::config::ThemeName;
        let cli = parse(&["torchtop", "--theme", "light"]);
        assert_eq!(cli.theme, Some(ThemeName::Light));
        assert!(!cli.delay_given, "the default delay is not given");
        assert!(parse(&["torchtop", "-d", "1"]).delay_given);
        assert!(parse(&["torchtop", "--delay=2"]).delay_given);
        assert_eq!(parse(&["torchtop"]).theme, None);
        let error = Cli::try_parse_from(["torchtop", "--theme", "neon"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("dark, light or mono"), "{error}");
    }

    /// A review: `torchtop serve -d 2` was refused ("unexpected argument '-d'"), while the
    /// README said `-d` sets serve's interval; `record -d` worked.
    #[test]
    fn serve_takes_its_own_delay_after_the_subcommand() {
        let delay_of = |cli: Cli| match cli.command {
            Some(Command::Serve(args)) => args.delay,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            delay_of(parse(&["torchtop", "serve", "-d", "2"])),
            Some(2.0)
        );
        assert_eq!(delay_of(parse(&["torchtop", "-d", "3", "serve"])), None);
        let error = Cli::try_parse_from(["torchtop", "serve", "--delay", "0"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("between 0.1 and 86400 seconds"), "{error}");
    }

    #[test]
    fn user_and_gpu_filters() {
        let cli = Cli::try_parse_from(["torchtop", "--user", "root", "--gpus", "0, 3,3"]).unwrap();
        assert_eq!(cli.user.as_deref(), Some("root"));
        let uid = Cli::try_parse_from(["torchtop", "--user", "4242"]).unwrap();
        assert_eq!(
            uid.user.as_deref(),
            Some("4242"),
            "a uid without a name here"
        );
        // The admin review: `--user 1000` matched nothing where uid 1000 has a login name,
        // which rows show instead of the uid.
        let named = Cli::try_parse_from(["torchtop", "--user", "0"]).unwrap();
        assert_eq!(named.user.as_deref(), Some("root"));
        let error = Cli::try_parse_from(["torchtop", "--user", "nosuch\x1b[2J"])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("no user is named nosuch\\e[2J on this machine"),
            "{error}"
        );
        assert_eq!(cli.gpus, Some(GpuList(vec![0, 3])));
        let error = Cli::try_parse_from(["torchtop", "--gpus", "0,x"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("'x' is not a GPU index"), "{error}");
        assert!(Cli::try_parse_from(["torchtop", "--gpus", ""]).is_err());
    }

    #[test]
    fn delay_has_a_floor() {
        assert!(Cli::try_parse_from(["torchtop", "-d", "0.05"]).is_err());
        let cli = Cli::try_parse_from(["torchtop", "-d", "0.1"]).unwrap();
        assert_eq!(cli.delay, 0.1);
        assert_eq!(Cli::try_parse_from(["torchtop"]).unwrap().delay, 1.0);
    }

    #[test]
    fn durations_are_bounded_with_a_sentence() {
        for (flag, value) in [
            ("-d", "1e20"),
            ("-d", "inf"),
            ("-d", "NaN"),
            ("-d", "86401"),
            ("--timeout", "1e308"),
            ("--timeout", "0"),
            ("--timeout=-1", ""),
        ] {
            let args = ["torchtop", flag, value];
            let args = if value.is_empty() {
                &args[..2]
            } else {
                &args[..]
            };
            let error = Cli::try_parse_from(args).unwrap_err().to_string();
            assert!(error.contains("must be between"), "{flag} {value}: {error}");
            assert!(error.contains("86400 seconds"), "{flag} {value}: {error}");
        }
        let cli = Cli::try_parse_from(["torchtop", "-d", "86400", "--timeout", "86400"]).unwrap();
        assert_eq!((cli.delay, cli.timeout), (86_400.0, 86_400.0));
        let error = Cli::try_parse_from(["torchtop", "-d", "\x1b[2J"])
            .unwrap_err()
            .to_string();
        assert!(error.contains(r"'\e[2J' is not a number"), "{error}");
    }

    #[test]
    fn json_is_one_document_with_once_and_a_stream_without() {
        assert!(Cli::try_parse_from(["torchtop", "--once", "--json"]).is_ok());
        let stream = Cli::try_parse_from(["torchtop", "--json", "--samples", "3"]).unwrap();
        assert_eq!(stream.samples, Some(3));
        assert!(Cli::try_parse_from(["torchtop", "--samples", "3"]).is_err());
        for bad in ["0", "-1", "1.5"] {
            let error = Cli::try_parse_from(["torchtop", "--json", "--samples", bad])
                .unwrap_err()
                .to_string();
            assert!(error.contains("at least 1"), "{bad}: {error}");
        }
        for args in [&["-d", "-1"][..], &["--timeout", "-3"][..]] {
            let error = Cli::try_parse_from(["torchtop"].iter().chain(args))
                .unwrap_err()
                .to_string();
            assert!(error.contains("must be between"), "{args:?}: {error}");
        }
        let error = Cli::try_parse_from(["torchtop", "record", "--duration", "-5s"])
            .unwrap_err()
            .to_string();
        assert!(!error.contains("unexpected argument"), "{error}");
        assert!(Cli::try_parse_from(["torchtop", "--once", "--json", "--samples", "3"]).is_err());
    }

    /// The variables are read when the command is built; the test names them empty instead.
    #[test]
    fn an_empty_environment_variable_counts_as_unset() {
        let empty =
            |name: &std::ffi::OsStr| name.to_str().is_some_and(|n| n.starts_with("TORCHTOP_"));
        let command = without_empty_env(Cli::command(), &empty);
        let envs = |command: &clap::Command| -> Vec<String> {
            (command.get_arguments())
                .filter_map(|arg| arg.get_env())
                .map(|name| name.to_string_lossy().into_owned())
                .collect()
        };
        assert!(envs(&Cli::command()).contains(&"TORCHTOP_NVML_LIB".to_string()));
        assert_eq!(envs(&command), Vec::<String>::new());
        for sub in ["serve", "cluster"] {
            let before = Cli::command();
            let before = before.find_subcommand(sub).unwrap();
            assert!(!envs(before).is_empty(), "{sub} reads a variable");
            assert_eq!(
                envs(command.find_subcommand(sub).unwrap()),
                Vec::<String>::new()
            );
        }
        let kept = without_empty_env(Cli::command(), &|_| false);
        assert_eq!(envs(&kept), envs(&Cli::command()));
    }

    /// A review: `torchtop --readonly replay --demo` took `replay` as the flag's value.
    #[test]
    fn readonly_takes_no_value_and_a_subcommand_may_follow() {
        let cli = parse(&["torchtop", "--readonly", "replay", "--demo"]);
        assert!(cli.readonly);
        assert!(matches!(
            cli.command,
            Some(Command::Replay { demo: true, .. })
        ));
        assert!(Cli::try_parse_from(["torchtop", "--readonly=false"]).is_err());
    }

    #[test]
    fn run_takes_the_rest_of_the_line() {
        let cli = Cli::try_parse_from(["torchtop", "run", "--", "python", "-c", "pass"]).unwrap();
        match cli.command {
            Some(Command::Run { command, .. }) => assert_eq!(command, ["python", "-c", "pass"]),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn version_names_the_commit_and_the_features() {
        let error = Cli::try_parse_from(["torchtop", "--version"]).unwrap_err();
        let shown = error.to_string();
        let features = if cfg!(feature = "torch") {
            "features: torch"
        } else {
            "features: none"
        };
        assert!(shown.starts_with(&format!("torchtop {} (commit ", env!("CARGO_PKG_VERSION"))));
        assert!(shown.contains(features), "{shown}");
    }

    #[test]
    fn completions_and_man_page_cover_the_subcommands() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let script = String::from_utf8(completions(shell)).unwrap();
            for word in ["snapshot", "attach", "nvml-lib", "completions"] {
                assert!(script.contains(word), "{shell}: no {word}");
            }
        }
        let page = String::from_utf8(man_page(None).unwrap()).unwrap();
        assert!(page.contains(".TH torchtop 1"), "{page}");
        assert!(page.contains("nvml\\-lib"), "{page}");
        let serve = String::from_utf8(man_page(Some("serve")).unwrap()).unwrap();
        assert!(serve.contains(".TH torchtop-serve 1"), "{serve}");
        let error = man_page(Some("nope\x1b")).unwrap_err();
        assert!(error.contains("'nope\\e'"), "{error}");
        assert!(error.contains("serve, cluster"), "{error}");
    }
}
