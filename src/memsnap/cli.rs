//! `torchtop snapshot FILE [--json] [--folded] [--flamegraph OUT.svg] [--compare A B]`: the
//! arguments and what each combination prints. Without an output flag, a terminal gets the
//! interactive viewer and a pipe gets the text summary.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::{analysis::compare, load, output, text::escape, view, Links, LoadedSnapshot};

#[derive(Debug, Clone, Args)]
pub struct SnapshotArgs {
    /// A pickle written by torch.cuda.memory._dump_snapshot() (or by torchtop's `s` key).
    #[arg(value_name = "FILE", required_unless_present = "compare")]
    pub(crate) file: Option<PathBuf>,

    /// Print the summary per device and the top stacks as JSON.
    #[arg(long)]
    pub(crate) json: bool,

    /// Print folded stacks weighted in bytes (for flamegraph.pl, inferno and speedscope).
    #[arg(long, conflicts_with = "json")]
    pub(crate) folded: bool,

    /// Write an SVG flame graph of live bytes by stack to this file.
    #[arg(long, value_name = "OUT.svg")]
    pub(crate) flamegraph: Option<PathBuf>,

    /// Show what grew between two snapshots, by stack (with --json: as JSON).
    #[arg(long, num_args = 2, value_names = ["A", "B"],
          conflicts_with_all = ["file", "folded", "flamegraph"])]
    pub(crate) compare: Option<Vec<PathBuf>>,

    /// Draw the viewer without colours (also when NO_COLOR is set).
    #[arg(long)]
    pub(crate) no_color: bool,
}

/// Runs `torchtop snapshot`; errors go to stderr as sentences.
pub fn run(args: &SnapshotArgs) -> ExitCode {
    match execute(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.kind == ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            say!("torchtop snapshot: {}", error.message);
            ExitCode::FAILURE
        }
    }
}

#[derive(PartialEq, Eq)]
enum ErrorKind {
    BrokenPipe,
    Other,
}

struct Failure {
    kind: ErrorKind,
    message: String,
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Self {
        Failure {
            kind: if error.kind() == io::ErrorKind::BrokenPipe {
                ErrorKind::BrokenPipe
            } else {
                ErrorKind::Other
            },
            message: format!("could not write the output: {error}"),
        }
    }
}

fn fail(message: String) -> Failure {
    Failure {
        kind: ErrorKind::Other,
        message,
    }
}

fn open(path: &Path) -> Result<LoadedSnapshot, Failure> {
    load(path, Links::Follow).map_err(|e| fail(e.to_string()))
}

fn execute(args: &SnapshotArgs) -> Result<(), Failure> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if let Some(pair) = &args.compare {
        let (before, after) = (open(&pair[0])?, open(&pair[1])?);
        let diffs = compare::compare(&before.snapshot, &after.snapshot);
        if args.json {
            writeln!(out, "{}", output::compare_json(&diffs))?;
        } else {
            output::compare_text(&diffs, &mut out)?;
        }
        return Ok(out.flush()?);
    }
    let path = args
        .file
        .as_deref()
        .expect("clap requires FILE without --compare");
    let loaded = open(path)?;
    if let Some(svg) = &args.flamegraph {
        write_flamegraph(&loaded, svg)?;
    }
    if args.json {
        writeln!(
            out,
            "{}",
            crate::format::json::pretty(&output::json(&loaded)).unwrap_or_default()
        )?;
    } else if args.folded {
        output::folded(&loaded, &mut out)?;
    } else if args.flamegraph.is_none() {
        // A dumb terminal (TERM=dumb or unset) gets the text a pipe gets, not a refusal.
        if io::stdout().is_terminal() && crate::terminal::can_draw_full_screen() {
            drop(out);
            let colors =
                !args.no_color && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            return view::run_standalone(loaded, colors)
                .map_err(|e| fail(format!("the viewer stopped: {e}")));
        }
        output::text(&loaded, &mut out)?;
    }
    Ok(out.flush()?)
}

/// Writes the SVG into a new file beside `svg`, then renames it over `svg`: a symbolic or hard
/// link another user planted at that name is replaced, never written through (root writing a
/// flamegraph to /tmp overwrote the file such a link named).
fn write_flamegraph(loaded: &LoadedSnapshot, svg: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    let shown = svg.display().to_string();
    let dir = match svg.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let file = tempfile::Builder::new()
        .prefix(".torchtop-flamegraph-")
        // As File::create would: 0666 less the umask.
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| fail(format!("could not create {}: {e}", escape(&shown))))?;
    let mut writer = BufWriter::new(file);
    output::flamegraph(loaded, &mut writer).map_err(|e| fail(format!("{} {e}", loaded.name())))?;
    let file = writer
        .into_inner()
        .map_err(|e| fail(format!("could not write {}: {}", escape(&shown), e.error())))?;
    file.persist(svg)
        .map_err(|e| fail(format!("could not create {}: {}", escape(&shown), e.error)))?;
    Ok(())
}
