//! The time bar under the replay: play or pause, speed, the time shown, a bar from the first
//! frame to the last with the events marked, and the keys; or the `g` prompt while a time is
//! typed.

use jiff::tz::TimeZone;
use ratatui::{
    layout::Rect,
    text::{Line, Span},
    widgets::Paragraph,
    Frame,
};

use super::player::Position;
use super::transport::{input_hint, Transport};
use crate::format::clock::{clock, zone_name};
use crate::format::escape;
use crate::terminal::theme::Theme;

const KEYS: &str = "Space play/pause  Left/Right step  +/- speed  g go to  [ ] events";

pub(crate) fn render(frame: &mut Frame, area: Rect, transport: &Transport, theme: Theme) {
    let line = match (&transport.input, &transport.position) {
        (Some(text), _) => prompt(text, transport, theme),
        (None, Some(position)) => bar(position, &transport.zone, area.width, theme),
        (None, None) => Line::from(Span::styled(" reading the recording...", theme.dim())),
    };
    frame.render_widget(Paragraph::new(line), area);
}

fn prompt(text: &str, transport: &Transport, theme: Theme) -> Line<'static> {
    Line::from(vec![
        Span::styled(" go to: ", theme.label()),
        Span::styled(format!("{}_", escape(text)), theme.selected()),
        Span::styled(format!("  {}", escape(&input_hint(transport))), theme.dim()),
    ])
}

/// The end time carries the zone's name: the one place the bar says which clock it reads.
fn bar(position: &Position, zone: &TimeZone, width: u16, theme: Theme) -> Line<'static> {
    let state = if position.paused { " ||" } else { " |>" };
    let speed = if position.speed < 1.0 {
        format!(" {}x ", position.speed)
    } else {
        format!(" {:.0}x ", position.speed)
    };
    let now = clock(position.time, zone);
    let counter = format!(" {}/{} ", position.index + 1, position.count);
    let end = format!(
        "{} {}",
        clock(position.end, zone),
        zone_name(position.end, zone)
    );
    let fixed = state.len() + speed.len() + now.len() + end.len() + counter.len() + 4;
    let keys = if usize::from(width) >= fixed + 24 + KEYS.len() + 2 {
        format!("  {KEYS}")
    } else {
        String::new()
    };
    let cells = usize::from(width).saturating_sub(fixed + keys.len()).max(4);
    let mut spans = vec![
        Span::styled(state.to_string(), theme.brand()),
        Span::styled(speed, theme.label()),
        Span::styled(now, theme.plain()),
        Span::raw(" "),
    ];
    spans.extend(track(position, cells, theme));
    spans.push(Span::raw(" "));
    spans.push(Span::styled(end, theme.dim()));
    spans.push(Span::styled(counter, theme.dim()));
    spans.push(Span::styled(keys, theme.dim()));
    Line::from(spans)
}

/// The bar itself: played cells, the cursor, events as ticks.
fn track(position: &Position, cells: usize, theme: Theme) -> Vec<Span<'static>> {
    let span = (position.end - position.start).max(1e-9);
    let cell_of = |t: f64| {
        (((t - position.start) / span) * (cells - 1) as f64)
            .round()
            .clamp(0.0, (cells - 1) as f64) as usize
    };
    let at = cell_of(position.time);
    let mut events = vec![false; cells];
    for &t in position.events.iter() {
        events[cell_of(t)] = true;
    }
    (0..cells)
        .map(|i| {
            if i == at {
                Span::styled("@", theme.selected())
            } else if events[i] {
                Span::styled("!", theme.warn())
            } else if i < at {
                Span::styled("=", theme.brand())
            } else {
                Span::styled("-", theme.dim())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_bar_puts_the_cursor_and_the_events_in_place() {
        let position = Position {
            index: 50,
            count: 101,
            time: 1050.0,
            start: 1000.0,
            end: 1100.0,
            paused: true,
            speed: 8.0,
            events: Arc::new(vec![1000.0, 1100.0]),
        };
        let spans = track(&position, 11, Theme::new(false));
        let text: String = spans.iter().map(|s| s.content.as_ref()).collect();
        assert_eq!(text, "!====@----!");
        let line = bar(&position, &TimeZone::UTC, 160, Theme::new(false));
        let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
        assert!(text.starts_with(" || 8x 00:17:30 !"), "{text}");
        assert!(text.contains("! 00:18:20 UTC "), "{text}");
        let new_york = TimeZone::get("America/New_York").unwrap();
        let line = bar(&position, &new_york, 160, Theme::new(false));
        let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
        assert!(text.starts_with(" || 8x 19:17:30 !"), "{text}");
        assert!(text.contains("! 19:18:20 EST "), "{text}");
        assert!(text.contains(" 51/101 "), "{text}");
        assert!(text.contains("[ ] events"), "{text}");
    }

    /// The prompt's hint and a refused time's sentence, whole at 80 columns after `-5m`.
    #[test]
    fn the_go_to_prompt_fits_80_columns() {
        let mut transport = Transport::new(std::sync::mpsc::channel().0, TimeZone::UTC);
        let line = prompt("-5m", &transport, Theme::new(false));
        let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
        let cells = line.width();
        assert!(
            cells <= 80 && text.ends_with("Enter goes, Esc cancels"),
            "{cells}: {text}"
        );
        let mut app = crate::app::App::new(1.0, false, true);
        for c in "g-5x\r".chars() {
            let code = match c {
                '\r' => crossterm::event::KeyCode::Enter,
                c => crossterm::event::KeyCode::Char(c),
            };
            let key = crossterm::event::KeyEvent::from(code);
            transport.on_key(&mut app, key);
        }
        let prompt = prompt("-5x", &transport, Theme::new(false));
        let text: String = prompt.spans.iter().map(|s| s.content.as_ref()).collect();
        assert!(text.contains("'-5x' is not a time: HH:MM"), "{text}");
        assert!(prompt.width() <= 80, "{}: {text}", prompt.width());
    }
}
