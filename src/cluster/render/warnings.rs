//! The warnings panel of the cluster view: every node's warnings, most severe first, a node
//! that is down among them, each with its message where there is one.
//!
//! A warning a node exports has no message (the exporter labels it with its id, severity and
//! subject only): its row says N/A, and a note under the list says where the message is, so
//! that N/A is not read as a message that is empty.

use ratatui::text::{Line, Span};

use super::{title, unread_line, Columns};
use crate::cluster::state::{ClusterApp, Listed};
use crate::format::{pad_left_aligned, NA};
use crate::terminal::theme::Theme;

/// What the note under the list says about the warnings without a message.
/// `torchtop serve` exports a warning's id, severity and subject; "(w)" is the key of the node's
/// own warnings view, which has the message, evidence and remedy. It fits 80 columns.
pub(super) const NO_MESSAGE_NOTE: &str =
    "N/A: `torchtop serve` exports no message; `torchtop` on the node shows it (w)";

pub(super) fn warning_lines(app: &ClusterApp, theme: Theme, cols: Columns) -> Vec<Line<'static>> {
    let mut lines = vec![
        title(
            "WARNINGS FROM EVERY NODE".into(),
            app.stale_shown().warnings,
            theme,
            cols,
        ),
        Line::styled(
            format!(
                "  SEV  {} {} {} MESSAGE",
                pad_left_aligned("NODE", cols.host),
                pad_left_aligned("WARNING", cols.id),
                pad_left_aligned("SUBJECT", cols.subject),
            ),
            theme.label(),
        ),
    ];
    let warnings = &app.view.warnings;
    let unread = unread_line(app, Listed::Warnings, theme);
    if warnings.is_empty() && unread.is_none() {
        lines.push(Line::styled("  none", theme.dim()));
    }
    lines.extend(unread);
    for warning in warnings {
        let (label, style) = match warning.severity.as_str() {
            "critical" => ("CRIT", theme.critical()),
            "warn" => ("WARN", theme.warn()),
            _ => ("INFO", theme.label()),
        };
        lines.push(Line::from(vec![
            Span::raw("  "),
            Span::styled(label, style),
            Span::raw(format!(
                " {} {} {} {}",
                pad_left_aligned(&warning.hostname, cols.host),
                pad_left_aligned(&warning.id, cols.id),
                pad_left_aligned(&warning.subject, cols.subject),
                warning.message.as_deref().unwrap_or(NA),
            )),
        ]));
    }
    if warnings.iter().any(|w| w.message.is_none()) {
        lines.push(Line::styled(format!("  {NO_MESSAGE_NOTE}"), theme.dim()));
    }
    lines
}
