//! Writes a frame's changed cells as escape codes, as crossterm's backend for ratatui does
//! (a cursor move where a cell does not follow the last, colours and text attributes only when
//! they change, everything reset at the end), but without an allocation: crossterm's
//! `SetAttribute` builds a `String` for each attribute it writes, and a frame changes
//! attributes a few times. The attributes' SGR numbers are written here instead.

use std::io::{self, Write};

use crossterm::cursor::MoveTo;
use crossterm::queue;
use crossterm::style::{
    Color as CrosstermColor, Colors, Print, SetBackgroundColor, SetColors, SetForegroundColor,
    SetUnderlineColor,
};
use ratatui::backend::IntoCrossterm;
use ratatui::buffer::Cell;
use ratatui::style::{Color, Modifier};

/// SGR 0: every attribute and colour back to the terminal's default.
const RESET: u8 = 0;

/// Writes `content` (cells with their column and row, in the order ratatui's diff gives them).
pub(crate) fn draw<'a, W: Write>(
    writer: &mut W,
    content: impl Iterator<Item = (u16, u16, &'a Cell)>,
) -> io::Result<()> {
    let (mut fg, mut bg, mut underline) = (Color::Reset, Color::Reset, Color::Reset);
    let mut modifier = Modifier::empty();
    let mut last: Option<(u16, u16)> = None;
    for (x, y, cell) in content {
        if !matches!(last, Some((lx, ly)) if ly == y && lx.checked_add(1) == Some(x)) {
            queue!(writer, MoveTo(x, y))?;
        }
        last = Some((x, y));
        if cell.modifier != modifier {
            write_modifier_change(writer, modifier, cell.modifier)?;
            modifier = cell.modifier;
        }
        if cell.fg != fg || cell.bg != bg {
            let colors = Colors::new(cell.fg.into_crossterm(), cell.bg.into_crossterm());
            queue!(writer, SetColors(colors))?;
            (fg, bg) = (cell.fg, cell.bg);
        }
        if cell.underline_color != underline {
            queue!(
                writer,
                SetUnderlineColor(cell.underline_color.into_crossterm())
            )?;
            underline = cell.underline_color;
        }
        queue!(writer, Print(cell.symbol()))?;
    }
    queue!(
        writer,
        SetForegroundColor(CrosstermColor::Reset),
        SetBackgroundColor(CrosstermColor::Reset),
        SetUnderlineColor(CrosstermColor::Reset),
    )?;
    sgr(writer, RESET)
}

/// The attributes turned off, then those turned on. Bold and dim share one "normal
/// intensity" code to turn either off, so turning one off turns the other on again if kept.
fn write_modifier_change<W: Write>(writer: &mut W, from: Modifier, to: Modifier) -> io::Result<()> {
    let removed = from - to;
    let added = to - from;
    if removed.contains(Modifier::REVERSED) {
        sgr(writer, 27)?;
    }
    let normal_intensity = removed.intersects(Modifier::BOLD | Modifier::DIM);
    if normal_intensity {
        sgr(writer, 22)?;
        if to.contains(Modifier::DIM) {
            sgr(writer, 2)?;
        }
        if to.contains(Modifier::BOLD) {
            sgr(writer, 1)?;
        }
    }
    for (off, code) in [
        (Modifier::ITALIC, 23),
        (Modifier::UNDERLINED, 24),
        (Modifier::CROSSED_OUT, 29),
        (Modifier::HIDDEN, 28),
    ] {
        if removed.contains(off) {
            sgr(writer, code)?;
        }
    }
    if removed.intersects(Modifier::SLOW_BLINK | Modifier::RAPID_BLINK) {
        sgr(writer, 25)?;
    }
    let intensity = |m: Modifier| (!normal_intensity).then_some(m);
    for (on, code) in [
        (Some(Modifier::REVERSED), 7),
        (intensity(Modifier::BOLD), 1),
        (Some(Modifier::ITALIC), 3),
        (Some(Modifier::UNDERLINED), 4),
        (intensity(Modifier::DIM), 2),
        (Some(Modifier::CROSSED_OUT), 9),
        (Some(Modifier::HIDDEN), 8),
        (Some(Modifier::SLOW_BLINK), 5),
        (Some(Modifier::RAPID_BLINK), 6),
    ] {
        if on.is_some_and(|on| added.contains(on)) {
            sgr(writer, code)?;
        }
    }
    Ok(())
}

fn sgr<W: Write>(writer: &mut W, code: u8) -> io::Result<()> {
    write!(writer, "\x1b[{code}m")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::{Backend, CrosstermBackend};

    /// Every pair of modifiers over a few colours, in runs that do and do not follow each
    /// other: the bytes are crossterm's backend's, byte for byte.
    #[test]
    fn writes_what_crossterms_backend_writes() {
        let all = Modifier::all().iter().collect::<Vec<_>>();
        let mut sets = vec![Modifier::empty(), Modifier::all()];
        sets.extend(all.iter().copied());
        for (i, a) in all.iter().enumerate() {
            for b in &all[i..] {
                sets.push(*a | *b);
            }
        }
        sets.push(Modifier::BOLD | Modifier::DIM | Modifier::REVERSED);
        let colors = [
            Color::Reset,
            Color::Red,
            Color::Indexed(200),
            Color::Rgb(1, 2, 3),
        ];
        let mut cells = Vec::new();
        for (n, from) in sets.iter().enumerate() {
            for to in &sets {
                let mut cell = Cell::new(if n % 3 == 0 { "é" } else { "x" });
                cell.modifier = *from;
                cell.fg = colors[n % 4];
                cells.push(cell.clone());
                cell.modifier = *to;
                cell.bg = colors[(n / 4) % 4];
                cell.underline_color = colors[(n / 16) % 4];
                cells.push(cell);
            }
        }
        let content = || {
            cells.iter().enumerate().map(|(i, cell)| {
                let x = (i % 97) as u16 + u16::from(i % 5 == 0);
                (x, (i / 97) as u16, cell)
            })
        };
        let mut theirs = Vec::new();
        CrosstermBackend::new(&mut theirs).draw(content()).unwrap();
        let mut ours = Vec::new();
        draw(&mut ours, content()).unwrap();
        assert!(ours.len() > 10_000);
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
    }
}
