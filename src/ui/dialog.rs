//! The dialogs of [`Mode`]: the confirmation before a signal or a reset of an agent's peak
//! memory figures (`P`), the F9 signal menu, the `n` nice prompt and the F6 sort menu, each a centred popup drawn over the panels. The `/` filter
//! prompt lives in the status line instead (see [`super::status`]), so the rows it filters stay
//! in sight.

use ratatui::{
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::{Block, Borders, Clear},
    Frame,
};

use super::label::Label;
use crate::actions::ActionTarget;
use crate::actions::{Signal, NICE_MAX, NICE_MIN};
use crate::app::agent_keys::AgentTarget;
use crate::app::{App, Mode};
use crate::format;
use crate::model::filter::SortKey;
use crate::terminal::theme::Theme;

/// Targets listed by name in a dialog; the rest are counted.
const LISTED_TARGETS: usize = 8;
const MAX_WIDTH: u16 = 76;

pub(crate) fn render(frame: &mut Frame, screen: Rect, app: &App, theme: Theme) {
    match &app.mode {
        Mode::Confirm { signal, targets } => confirm(frame, screen, app, *signal, targets, theme),
        Mode::ConfirmPeakReset { target } => confirm_peak_reset(frame, screen, app, target, theme),
        Mode::SignalMenu {
            selected, targets, ..
        } => signal_menu(frame, screen, *selected, targets, theme),
        Mode::NiceInput {
            text,
            error,
            targets,
            current,
        } => nice_input(
            frame,
            screen,
            text,
            error.as_deref(),
            targets,
            *current,
            theme,
        ),
        Mode::SortMenu { selected } => sort_menu(frame, screen, app, *selected, theme),
        Mode::UserMenu { selected, users } => user_menu(frame, screen, *selected, users, theme),
        Mode::Normal | Mode::Filter => {}
    }
}

fn confirm(
    frame: &mut Frame,
    screen: Rect,
    app: &App,
    signal: Signal,
    targets: &[ActionTarget],
    theme: Theme,
) {
    let question = match targets.len() {
        1 => format!("Send {signal} to this process?"),
        n => format!("Send {signal} to these {n} processes?"),
    };
    let mut lines = vec![Line::styled(question, theme.warn()), Line::raw("")];
    lines.extend(target_table(targets, theme, |pid| rank_of(app, pid)));
    lines.extend(namespace_inits(app, signal, targets, theme));
    lines.extend(jobs_cut_short(app, signal, targets, theme));
    let popup = Popup {
        title: format!(" {signal} "),
        hint: " y or Enter: send   n or Esc: cancel ",
    };
    popup.draw(frame, screen, lines);
}

/// What a signal does to a target that is pid 1 of a PID namespace of its own (a container's
/// init): the kernel drops a signal sent from outside the namespace that the init does not
/// handle, SIGKILL and SIGSTOP apart, and the init's death ends every process in it. An admin
/// was told "sent SIGTERM" to a container's init that went on running.
fn namespace_inits(
    app: &App,
    signal: Signal,
    targets: &[ActionTarget],
    theme: Theme,
) -> Vec<Line<'static>> {
    let is_init = |pid: u32| {
        let row = app.snapshot.processes.iter().find(|p| p.pid == pid);
        let ns_pids = row.and_then(|p| p.ns_pids.as_deref());
        ns_pids.is_some_and(|ns| ns.len() > 1 && ns.last() == Some(&1))
    };
    let inits: Vec<String> = (targets.iter().map(ActionTarget::pid))
        .filter(|&pid| is_init(pid))
        .map(|pid| pid.to_string())
        .collect();
    if inits.is_empty() {
        return Vec::new();
    }
    let effect = match signal {
        Signal::Kill => "SIGKILL ends every process in its namespace (its container)".to_string(),
        Signal::Stop => "SIGSTOP stops it; the processes under it go on".to_string(),
        other => format!(
            "the kernel drops {other} sent from outside unless it handles {other}, and it \
             then goes on running"
        ),
    };
    let text = format!(
        "{} {} pid 1 of a PID namespace of its own (a container's init): {effect}.",
        inits.join(", "),
        if inits.len() == 1 { "is" } else { "are each" },
    );
    let width = usize::from(MAX_WIDTH) - 4;
    let mut lines = vec![Line::raw("")];
    let wrapped = format::wrap::lines(&text, width).into_iter();
    lines.extend(wrapped.map(|line| Line::styled(line, theme.warn())));
    lines
}

/// What a signal to some ranks of a distributed job, not all, does to the rest: a stopped or
/// ended rank leaves the others waiting in their next collective until its timeout. A user
/// who killed one runaway rank from the monitor held every other GPU of the job for that long.
fn jobs_cut_short(
    app: &App,
    signal: Signal,
    targets: &[ActionTarget],
    theme: Theme,
) -> Vec<Line<'static>> {
    if signal == Signal::Cont {
        return Vec::new();
    }
    let targeted = |pid: u32| targets.iter().any(|t| t.pid() == pid);
    let mut lines = Vec::new();
    for job in &app.snapshot.jobs {
        let hit = job.ranks.iter().filter(|r| targeted(r.pid)).count();
        let left = job.ranks.len() - hit;
        if hit == 0 || left == 0 {
            continue;
        }
        let (ranks, are, they, wait, their) = if left == 1 {
            ("rank", "is", "it", "waits", "its GPU")
        } else {
            ("ranks", "are", "they", "wait", "their GPUs")
        };
        let text = format!(
            "{left} other {ranks} of {} {are} not in this: in the next collective {they} \
             {wait} for the ranks signalled until its timeout (NCCL's default is 10 minutes), \
             holding {their}. Tag every rank with Space to signal the whole job.",
            format::escape(&job.id),
        );
        lines.push(Line::raw(""));
        let width = usize::from(MAX_WIDTH) - 4;
        let wrapped = format::wrap::lines(&text, width);
        lines.extend(wrapped.into_iter().map(|l| Line::styled(l, theme.warn())));
    }
    lines
}

/// `P`: the peaks PyTorch's allocator kept cannot be had back once reset.
fn confirm_peak_reset(
    frame: &mut Frame,
    screen: Rect,
    app: &App,
    target: &AgentTarget,
    theme: Theme,
) {
    let mut lines = vec![
        Line::styled(
            "Reset the peak memory figures of this process?",
            theme.warn(),
        ),
        Line::raw("PyTorch's peak allocated and reserved bytes start again from now."),
        Line::raw("The program's own torch.cuda.max_memory_allocated() resets too."),
        Line::raw(""),
        target_header(theme),
    ];
    let (user, command) = (target.user.as_deref(), target.command.as_deref());
    lines.extend(target_lines(target.pid, user, command, theme, |pid| {
        rank_of(app, pid)
    }));
    let popup = Popup {
        title: " Reset peak memory ".to_string(),
        hint: " y or Enter: reset   n or Esc: cancel ",
    };
    popup.draw(frame, screen, lines);
}

fn signal_menu(
    frame: &mut Frame,
    screen: Rect,
    selected: usize,
    targets: &[ActionTarget],
    theme: Theme,
) {
    let mut lines: Vec<Line> = Signal::ALL
        .iter()
        .enumerate()
        .map(|(i, signal)| {
            let text = format!(
                " {:>2}  {:<8}  {}",
                signal.number(),
                signal.name(),
                meaning(*signal)
            );
            let style = if i == selected {
                theme.selected()
            } else {
                Style::new()
            };
            Line::styled(text, style)
        })
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::styled(format!("to {}", who(targets)), theme.label()));
    let popup = Popup {
        title: " Send a signal ".to_string(),
        hint: " number or arrows, Enter: choose   q or Esc: close ",
    };
    popup.draw(frame, screen, lines);
}

fn meaning(signal: Signal) -> &'static str {
    match signal {
        Signal::Term => "ask it to end",
        Signal::Kill => "end it at once",
        Signal::Int => "interrupt, as Ctrl-C",
        Signal::Hup => "hang up",
        Signal::Stop => "pause it",
        Signal::Cont => "resume it",
        Signal::Usr1 => "user signal 1",
        Signal::Usr2 => "user signal 2",
    }
}

fn nice_input(
    frame: &mut Frame,
    screen: Rect,
    text: &str,
    error: Option<&str>,
    targets: &[ActionTarget],
    current: Option<i32>,
    theme: Theme,
) {
    let mut lines = vec![Line::styled(format!("for {}", who(targets)), theme.label())];
    if let Some(current) = current {
        lines.push(Line::raw(format!("now: {current}")));
    }
    lines.push(Line::from(vec![
        Span::raw(format!("new value ({NICE_MIN} to {NICE_MAX}): ")),
        Span::styled(format!("{text}_"), theme.selected()),
    ]));
    if let Some(error) = error {
        lines.push(Line::styled(error.to_string(), theme.critical()));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        "lower is more CPU; going below the current value needs root",
        theme.dim(),
    ));
    let popup = Popup {
        title: " Nice value ".to_string(),
        hint: " Enter: set   Esc: cancel ",
    };
    popup.draw(frame, screen, lines);
}

fn sort_menu(frame: &mut Frame, screen: Rect, app: &App, selected: usize, theme: Theme) {
    let mut lines: Vec<Line> = SortKey::ALL
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let current = if *key == app.settings.sort {
                "  (now)"
            } else {
                ""
            };
            let style = if i == selected {
                theme.selected()
            } else {
                Style::new()
            };
            Line::styled(format!(" {:<10}{current}", key.label()), style)
        })
        .collect();
    let order = if app.settings.reverse {
        "descending ▼"
    } else {
        "ascending ▲"
    };
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        format!("order: {order} (r reverses)"),
        theme.label(),
    ));
    if app.settings.tree {
        lines.push(Line::styled(
            "the tree view keeps its own order",
            theme.dim(),
        ));
    }
    let popup = Popup {
        title: " Sort by ".to_string(),
        hint: " Enter: sort   r: reverse   q or Esc: close ",
    };
    popup.draw(frame, screen, lines);
}

/// `u`: everyone, then each user with a process.
fn user_menu(frame: &mut Frame, screen: Rect, selected: usize, users: &[String], theme: Theme) {
    let choices = std::iter::once("all users".to_string())
        .chain(users.iter().map(|u| format::escape(u).into_owned()));
    let mut lines: Vec<Line> = choices
        .enumerate()
        .skip(selected.saturating_sub(usize::from(screen.height.saturating_sub(8))))
        .map(|(i, name)| {
            let style = if i == selected {
                theme.selected()
            } else {
                Style::new()
            };
            Line::styled(format!(" {name}"), style)
        })
        .collect();
    lines.truncate(usize::from(screen.height.saturating_sub(6)).max(1));
    let popup = Popup {
        title: " Show the processes of ".to_string(),
        hint: " Enter: choose   q or Esc: close ",
    };
    popup.draw(frame, screen, lines);
}

/// "1234 (python3 train.py)" for one target, "3 processes" for several.
fn who(targets: &[ActionTarget]) -> String {
    match targets {
        [one] => one.label(),
        many => format!("{} processes", many.len()),
    }
}

/// "rank 0/8 of job 127.0.0.1:29500" for a rank of a distributed job, "rank 0/2" for a torch
/// process outside any job torchtop grouped; `None` for any other process.
fn rank_of(app: &App, pid: u32) -> Option<String> {
    for job in &app.snapshot.jobs {
        if let Some(rank) = job.ranks.iter().find(|r| r.pid == pid) {
            let place = match (rank.rank, rank.world_size) {
                (Some(r), Some(w)) => format!("rank {r}/{w}"),
                (Some(r), None) => format!("rank {r}"),
                _ => "a rank".to_string(),
            };
            return Some(format!("{place} of {}", format::escape(&job.id)));
        }
    }
    let rows = app.rows();
    let row = rows.iter().find(|r| r.pid == pid)?;
    row.rank_text()
        .filter(|text| text.contains('/') || text.parse::<u32>().is_ok())
        .map(|text| format!("rank {text}"))
}

/// PID, USER and COMMAND of each target, the command cut to the dialog's width; under a torch
/// rank, the rank and its job (`rank_of`).
fn target_table(
    targets: &[ActionTarget],
    theme: Theme,
    rank_of: impl Fn(u32) -> Option<String>,
) -> Vec<Line<'static>> {
    let mut lines = vec![target_header(theme)];
    for target in targets.iter().take(LISTED_TARGETS) {
        let (user, command) = (target.user.as_deref(), target.command.as_deref());
        lines.extend(target_lines(target.pid(), user, command, theme, &rank_of));
    }
    if targets.len() > LISTED_TARGETS {
        lines.push(Line::styled(
            format!("… and {} more", targets.len() - LISTED_TARGETS),
            theme.dim(),
        ));
    }
    lines
}

/// The columns a dialog's target rows are under.
fn target_header(theme: Theme) -> Line<'static> {
    Line::styled(
        format!("{:>7}  {:<8}  COMMAND", "PID", "USER"),
        theme.label(),
    )
}

/// One target's row, and under a torch rank its rank and job.
fn target_lines(
    pid: u32,
    user: Option<&str>,
    command: Option<&str>,
    theme: Theme,
    rank_of: impl Fn(u32) -> Option<String>,
) -> Vec<Line<'static>> {
    // The popup's inside (its width less the borders and padding) less the pid, the user and
    // the two gaps: the line fits whole, so its own `…` marks the cut command.
    let command_width = usize::from(MAX_WIDTH) - 4 - (7 + 8 + 2 * 2);
    let mut lines = vec![Line::raw(format!(
        "{pid:>7}  {:<8}  {}",
        format::truncate(&format::text(user), 8),
        format::truncate(&format::text(command), command_width)
    ))];
    if let Some(rank) = rank_of(pid) {
        let text = format::truncate(&rank, command_width + 8 + 2);
        lines.push(Line::styled(format!("{:>7}  {text}", ""), theme.warn()));
    }
    lines
}

/// A bordered box centred on the screen, sized to its lines.
struct Popup {
    title: String,
    hint: &'static str,
}

impl Popup {
    fn draw(&self, frame: &mut Frame, screen: Rect, lines: Vec<Line<'_>>) {
        let widest = lines
            .iter()
            .map(Line::width)
            .chain([self.title.chars().count(), self.hint.chars().count()])
            .max()
            .unwrap_or(0);
        let width = (widest as u16 + 4).min(MAX_WIDTH).min(screen.width);
        let height = (lines.len() as u16 + 2).min(screen.height);
        let area = centred(screen, width, height);
        let block = Block::default()
            .borders(Borders::ALL)
            .title(self.title.clone())
            .title_bottom(self.hint)
            .padding(ratatui::widgets::Padding::horizontal(1));
        frame.render_widget(Clear, area);
        // The lines as a `Label` in the block, not a `Paragraph` of it: a line cut by a narrow
        // screen then ends in the cut mark.
        let inner = block.inner(area);
        frame.render_widget(block, area);
        frame.render_widget(Label::new(lines), inner);
    }
}

fn centred(screen: Rect, width: u16, height: u16) -> Rect {
    Rect::new(
        screen.x + (screen.width - width) / 2,
        screen.y + (screen.height - height) / 2,
        width,
        height,
    )
}
