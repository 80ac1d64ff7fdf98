//! A frame's way to the screen: ratatui renders it into its buffer, and [`paint`] writes only
//! the cells that differ from what the terminal shows ([`Shown`]).
//!
//! ratatui's own flush compares every cell of the screen and measures each symbol's display
//! width on the way, whether the cell changed or not: at rest, with one GPU and the clock the
//! only thing moving, that was 60% of the UI thread's instructions. Here a row equal to the one
//! shown is passed over with a plain field-by-field comparison, and only a row that differs
//! goes through ratatui's diff, which keeps its handling of wide and emoji cells.

use ratatui::backend::Backend;
use ratatui::buffer::{Buffer, Cell, CellDiffOption, CellWidth};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::{Frame, Terminal};

/// What the terminal shows, as torchtop last wrote it, and the scratch a frame's diff reuses.
#[derive(Default)]
pub(crate) struct Shown {
    /// The screen, cell by cell; empty when unknown, so the next frame is written whole.
    seen: Vec<Seen>,
    area: Rect,
    /// The frame being written, taken from the terminal meanwhile (an empty buffer otherwise).
    frame: Buffer,
    /// One row each, for ratatui's diff of a row that changed.
    before: Buffer,
    after: Buffer,
    /// The cells this frame writes, in screen order.
    changed: Vec<(u16, u16)>,
}

/// One cell as shown: a third of a [`Cell`]'s size, because comparing the screen with a frame
/// is mostly reading memory that has gone cold in the second since the last frame.
#[derive(Clone, Copy, PartialEq)]
struct Look {
    /// The symbol's bytes when it has at most four (one character); [`LONG`] otherwise.
    symbol: u32,
    fg: Color,
    bg: Color,
    underline: Color,
    modifier: Modifier,
    diff_option: CellDiffOption,
    skip: bool,
}

#[derive(Clone, Copy)]
struct Seen {
    look: Look,
    /// The symbol's display width, as ratatui measures it.
    width: u16,
}

/// A symbol longer than four bytes (a cluster of characters, such as some emoji) is not kept:
/// such a cell never compares equal, so it is written again with each frame that shows it.
const LONG: u32 = u32::MAX;

impl Look {
    #[allow(deprecated)] // `skip` is kept because ratatui's equality still compares it.
    fn of(cell: &Cell) -> Look {
        Look {
            symbol: symbol_bits(cell.symbol()),
            fg: cell.fg,
            bg: cell.bg,
            underline: cell.underline_color,
            modifier: cell.modifier,
            diff_option: cell.diff_option,
            skip: cell.skip,
        }
    }

    fn same(&self, other: &Look) -> bool {
        self.symbol != LONG && self == other
    }

    /// A cell that shows as this look did, for ratatui's diff; a long symbol becomes a
    /// placeholder of the same width that equals no cell a frame can hold (two graphemes).
    #[allow(deprecated)]
    fn cell(&self, width: u16) -> Cell {
        let bytes = self.symbol.to_le_bytes();
        let text: &str = match std::str::from_utf8(&bytes) {
            Ok(text) if self.symbol != LONG => text.trim_end_matches('\0'),
            _ => match width {
                0 => "\u{200B}\u{200B}",
                1 => "x\u{200B}",
                _ => "\u{3000}\u{200B}",
            },
        };
        let mut cell = Cell::EMPTY;
        cell.set_symbol(text);
        cell.fg = self.fg;
        cell.bg = self.bg;
        cell.underline_color = self.underline;
        cell.modifier = self.modifier;
        cell.diff_option = self.diff_option;
        cell.skip = self.skip;
        cell
    }
}

fn symbol_bits(symbol: &str) -> u32 {
    // Bytes past the end stay zero, so a symbol ending in NUL would read as a shorter one.
    match *symbol.as_bytes() {
        [a] if a != 0 => u32::from(a),
        [a, b] if b != 0 => u32::from_le_bytes([a, b, 0, 0]),
        [a, b, c] if c != 0 => u32::from_le_bytes([a, b, c, 0]),
        [a, b, c, d] if d != 0 => u32::from_le_bytes([a, b, c, d]),
        [] => 0,
        _ => LONG,
    }
}

impl Seen {
    fn of(cell: &Cell) -> Seen {
        Seen {
            look: Look::of(cell),
            width: cell.cell_width(),
        }
    }
}

impl Shown {
    /// Forgets the screen (it was cleared, scrolled or resized): the next frame is written
    /// whole against a blank screen.
    pub(crate) fn forget(&mut self) {
        self.seen.clear();
        self.area = Rect::ZERO;
    }

    /// Compares the frame with the screen row by row and records the cells to write; a row
    /// that differs goes through ratatui's diff and becomes the screen's row.
    fn update(&mut self) {
        self.changed.clear();
        let area = self.frame.area;
        if self.area != area || self.seen.len() != self.frame.content.len() {
            // A cleared screen shows blank cells, as a fresh buffer holds.
            self.seen = vec![Seen::of(&Cell::EMPTY); self.frame.content.len()];
            self.area = area;
        }
        let width = usize::from(area.width);
        if width == 0 {
            return;
        }
        for (index, row) in self.frame.content.chunks_exact(width).enumerate() {
            let seen = &mut self.seen[index * width..(index + 1) * width];
            if row
                .iter()
                .zip(seen.iter())
                .all(|(c, s)| s.look.same(&Look::of(c)))
            {
                continue;
            }
            let y = area.y + u16::try_from(index).unwrap_or(u16::MAX);
            let row_area = Rect::new(area.x, y, area.width, 1);
            self.before.resize(row_area);
            self.after.resize(row_area);
            for (cell, seen) in self.before.content.iter_mut().zip(seen.iter()) {
                *cell = seen.look.cell(seen.width);
            }
            self.after.content.clone_from_slice(row);
            let diff = self.before.diff_iter(&self.after).map(|(x, y, _)| (x, y));
            self.changed.extend(diff);
            for (seen, cell) in seen.iter_mut().zip(row) {
                *seen = Seen::of(cell);
            }
        }
    }

    /// The cells to write, each as the frame holds it.
    fn changes(&self) -> impl Iterator<Item = (u16, u16, &Cell)> {
        self.changed
            .iter()
            .map(|&(x, y)| (x, y, &self.frame[(x, y)]))
    }
}

/// Renders a frame with `render` and writes what changed to `terminal`'s backend, as ratatui's
/// `Terminal::draw` does (cursor hidden), but with one buffer: it is emptied again right after
/// the comparison, while it is still in the cache, and ratatui's second buffer stays unused.
/// The caller resizes first where the terminal can resize; a clear of the screen must be
/// followed by [`Shown::forget`], which [`super::sized::SizedBackend`] does itself.
///
/// # Errors
/// The backend's, when writing fails; `shown` is then forgotten, so the next frame is written
/// whole.
pub(crate) fn paint<B: Backend>(
    terminal: &mut Terminal<B>,
    shown: &mut Shown,
    render: impl FnOnce(&mut Frame),
) -> Result<(), B::Error> {
    render(&mut terminal.get_frame());
    std::mem::swap(terminal.current_buffer_mut(), &mut shown.frame);
    shown.update();
    let written = terminal.backend_mut().draw(shown.changes());
    shown.frame.reset();
    std::mem::swap(terminal.current_buffer_mut(), &mut shown.frame);
    if written.is_err() {
        shown.forget();
    }
    written?;
    terminal.hide_cursor()?;
    terminal.backend_mut().flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::{CrosstermBackend, TestBackend};
    use ratatui::style::Style;
    use ratatui::text::Line;
    use ratatui::widgets::Paragraph;
    use ratatui::{TerminalOptions, Viewport};

    /// What ratatui's own diff would write going from `before` to `after`.
    fn ratatui_writes(before: &Buffer, after: &Buffer) -> Vec<(u16, u16, String)> {
        before
            .diff(after)
            .into_iter()
            .map(|(x, y, c)| (x, y, c.symbol().to_owned()))
            .collect()
    }

    fn buffer(lines: &[&str], width: u16) -> Buffer {
        let area = Rect::new(0, 0, width, u16::try_from(lines.len()).unwrap());
        let mut buffer = Buffer::empty(area);
        for (y, line) in lines.iter().enumerate() {
            buffer.set_string(0, u16::try_from(y).unwrap(), line, Style::default());
        }
        buffer
    }

    fn writes(shown: &mut Shown, frame: &Buffer) -> Vec<(u16, u16, String)> {
        shown.frame = frame.clone();
        shown.update();
        shown
            .changes()
            .map(|(x, y, c)| (x, y, c.symbol().to_owned()))
            .collect()
    }

    #[test]
    fn writes_what_ratatui_would_and_only_that() {
        let frames = [
            buffer(&["GPU 0  55C", "", "mem 1.0G"], 12),
            buffer(&["GPU 0  56C", "", "mem 1.0G"], 12),
            buffer(&["GPU 0  56C", "", "mem 1.0G"], 12),
            // A wide character replaced by narrow ones, and the other way round.
            buffer(&["GPU 0  56C", "名前 x", "mem 1.0G"], 12),
            buffer(&["GPU 0  56C", "ab x", "mem 12.0G"], 12),
            buffer(&["│⣿⣀▁ 56C", "ab x", "mem 12.0G"], 12),
        ];
        let mut shown = Shown::default();
        let mut before = Buffer::empty(frames[0].area);
        for frame in &frames {
            assert_eq!(writes(&mut shown, frame), ratatui_writes(&before, frame));
            before = frame.clone();
        }
        assert!(
            writes(&mut shown, &frames[5]).is_empty(),
            "an unchanged frame writes nothing"
        );
    }

    #[test]
    fn a_style_change_alone_is_written() {
        let mut shown = Shown::default();
        let plain = buffer(&["ok"], 4);
        let mut red = plain.clone();
        red.set_style(Rect::new(0, 0, 1, 1), Style::default().fg(Color::Red));
        writes(&mut shown, &plain);
        assert_eq!(writes(&mut shown, &red), vec![(0, 0, "o".to_owned())]);
    }

    #[test]
    fn a_forgotten_or_resized_screen_is_written_whole() {
        let mut shown = Shown::default();
        let frame = buffer(&["ab", "cd"], 2);
        assert_eq!(writes(&mut shown, &frame).len(), 4);
        assert!(writes(&mut shown, &frame).is_empty());
        shown.forget();
        assert_eq!(writes(&mut shown, &frame).len(), 4);
        let wider = buffer(&["abc", "def"], 3);
        assert_eq!(writes(&mut shown, &wider).len(), 6);
    }

    #[test]
    fn a_long_symbol_is_written_with_each_frame_that_shows_it() {
        let mut shown = Shown::default();
        // A family emoji: one grapheme of several code points, wider than four bytes.
        let frame = buffer(&["\u{1F468}\u{200D}\u{1F469} x"], 6);
        assert_eq!(writes(&mut shown, &frame).len(), 2);
        assert_eq!(writes(&mut shown, &frame).len(), 1);
    }

    /// A terminal's input, kept for the emulator.
    #[derive(Clone, Default)]
    struct Tap(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

    impl std::io::Write for Tap {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Frames of text, wide characters, emoji and colours, changing at random from one to the
    /// next, painted into a terminal emulator: after each, the screen shows that frame.
    #[test]
    fn the_screen_shows_every_frame_painted() {
        let words = ["GPU", "名前", "⣿⣀", "│", "x", "🔥", "", "   ", "55°C", "ok"];
        let colors = [
            Color::Reset,
            Color::Red,
            Color::Indexed(6),
            Color::Rgb(1, 2, 3),
        ];
        let (width, height) = (24_u16, 6_u16);
        let area = Rect::new(0, 0, width, height);
        let viewport = Viewport::Fixed(area);
        let written = Tap::default();
        let backend = CrosstermBackend::new(written.clone());
        let mut terminal = Terminal::with_options(backend, TerminalOptions { viewport }).unwrap();
        let mut parser = vt100::Parser::new(height, width, 0);
        let mut shown = Shown::default();
        let mut seed = 7_u64;
        let mut next = move |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            usize::try_from(seed >> 33).unwrap() % n
        };
        for _ in 0..200 {
            let mut frame = Buffer::empty(area);
            for y in 0..height {
                let mut x = 0;
                while x < width {
                    let word = words[next(words.len())];
                    let style = Style::default().fg(colors[next(4)]).bg(colors[next(4)]);
                    let (end, _) = frame.set_stringn(x, y, word, usize::from(width - x), style);
                    x = end.max(x + 1);
                }
            }
            paint(&mut terminal, &mut shown, |f| {
                f.buffer_mut().content.clone_from_slice(&frame.content);
            })
            .unwrap();
            parser.process(&written.0.borrow_mut().split_off(0));
            for y in 0..height {
                for x in 0..width {
                    let (want, got) = (&frame[(x, y)], parser.screen().cell(y, x).unwrap());
                    if got.is_wide_continuation() {
                        continue;
                    }
                    assert_eq!(got.contents().trim(), want.symbol().trim(), "cell {x},{y}");
                }
            }
        }
    }

    #[test]
    fn paint_leaves_the_terminal_showing_each_frame() {
        let mut terminal = Terminal::new(TestBackend::new(10, 2)).unwrap();
        let mut shown = Shown::default();
        for text in ["one", "two", "two", "three"] {
            paint(&mut terminal, &mut shown, |frame| {
                frame.render_widget(Paragraph::new(Line::from(text)), frame.area());
            })
            .unwrap();
            terminal.backend().assert_buffer(&buffer(&[text, ""], 10));
        }
    }
}
