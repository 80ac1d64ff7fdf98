//! [`Label`]: one or a few lines of text without wrapping, drawn the way ratatui's `Paragraph`
//! draws them, cell for cell, but without its grapheme machinery when every character takes one
//! cell of its own ([`is_one_cell`]: printable ASCII, and the bars, box lines, arrows and signs
//! torchtop draws with). Anything else goes through `Paragraph` itself, so the screen is the
//! same either way; only the cost differs.

use ratatui::{
    buffer::Buffer,
    layout::{Alignment, Rect},
    style::Style,
    text::{Line, Span, Text},
    widgets::{Paragraph, Widget},
};
use std::fmt::{Arguments, Write as _};

use crate::format;

/// A `Paragraph` without wrap, block or scroll.
pub(crate) struct Label<'a> {
    text: Text<'a>,
    style: Style,
    alignment: Alignment,
}

impl<'a> Label<'a> {
    pub(crate) fn new(text: impl Into<Text<'a>>) -> Self {
        let text = text.into();
        let alignment = text.alignment.unwrap_or(Alignment::Left);
        Label {
            text,
            style: Style::new(),
            alignment,
        }
    }

    /// The style of the whole area, under the text's own (as `Paragraph::style`).
    pub(crate) fn style(mut self, style: Style) -> Self {
        self.style = style;
        self
    }

    pub(crate) fn alignment(mut self, alignment: Alignment) -> Self {
        self.alignment = alignment;
        self
    }

    fn is_one_cell_text(&self) -> bool {
        self.text.lines.iter().all(|line| {
            line.spans
                .iter()
                .all(|span| span.content.chars().all(is_one_cell))
        })
    }
}

/// Whether `c` is drawn by ratatui as one cell of its own: one column wide, and never joined
/// with its neighbours into one grapheme (no combining mark, joiner or variation selector).
/// Printable ASCII; Latin-1's signs and letters (not its soft hyphen, an invisible control);
/// arrows; box drawing, block elements and geometric shapes (not U+25FD and U+25FE, which are
/// emoji two columns wide). A test checks each against ratatui's own drawing.
pub(crate) fn is_one_cell(c: char) -> bool {
    matches!(
        c,
        ' '..='~'
            | '\u{A1}'..='\u{AC}'
            | '\u{AE}'..='\u{FF}'
            | '\u{2190}'..='\u{21FF}'
            | '\u{2500}'..='\u{25FC}'
    )
}

impl Widget for Label<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if !self.is_one_cell_text() {
            Paragraph::new(self.text)
                .style(self.style)
                .alignment(self.alignment)
                .render(area, buf);
            return;
        }
        let area = area.intersection(buf.area);
        // The default style changes no cell: not worth a walk over the area.
        if self.style != Style::new() {
            buf.set_style(area, self.style);
        }
        if area.is_empty() {
            return;
        }
        for (line, y) in self.text.lines.iter().zip(area.top()..area.bottom()) {
            let alignment = line.alignment.unwrap_or(self.alignment);
            put_line(buf, area, y, line, self.text.style, alignment);
        }
    }
}

/// One line of [`is_one_cell`] characters at row `y` of `area`: each one cell, cut at the
/// area's width, placed as `Paragraph` places a line (the offset from the cut width).
fn put_line(buf: &mut Buffer, area: Rect, y: u16, line: &Line, base: Style, align: Alignment) {
    let spans = line.spans.iter().map(|s| (s.content.as_ref(), s.style));
    put_runs(buf, area, y, spans, base.patch(line.style), align);
}

/// [`put_line`] of a line given as runs of text and their styles, under `line_style` (the
/// text's style patched with the line's).
fn put_runs<'s>(
    buf: &mut Buffer,
    area: Rect,
    y: u16,
    runs: impl Iterator<Item = (&'s str, Style)> + Clone,
    line_style: Style,
    align: Alignment,
) {
    // A left-aligned line starts at the left edge whatever its length: its characters run
    // out, or the cells do, without a count of them first.
    let width = if align == Alignment::Left {
        area.width
    } else {
        let total: usize = runs.clone().map(|(text, _)| text.chars().count()).sum();
        u16::try_from(total).unwrap_or(u16::MAX).min(area.width)
    };
    if width == 0 {
        return;
    }
    let indent = match align {
        Alignment::Center => (area.width / 2).saturating_sub(width / 2),
        Alignment::Right => area.width.saturating_sub(width),
        Alignment::Left => 0,
    };
    // The line's cells, one slice of the buffer's row: no position arithmetic per cell.
    let start = buf.index_of(area.left() + indent, y);
    let mut cells = buf.content[start..start + usize::from(width)].iter_mut();
    for (text, style) in runs {
        let style = line_style.patch(style);
        // Characters first: a run that ends takes no cell from the next.
        for (c, cell) in text.chars().zip(cells.by_ref()) {
            cell.set_char(c).set_style(style);
        }
        if cells.len() == 0 {
            return;
        }
    }
}

/// Lines of styled runs written into one `String`, which a panel fills each frame without a
/// `String` or `Span` per figure, then draws as a [`Label`] of the same lines would draw them
/// (left-aligned, under no style of their own but each line's).
#[derive(Default)]
pub(crate) struct Runs {
    text: String,
    /// Each run: where it ends in `text`, and its style.
    runs: Vec<(usize, Style)>,
    /// Each line: where its runs end in `runs`, and the line's style.
    lines: Vec<(usize, Style)>,
}

impl Runs {
    /// Forgets every line, keeping the room they took: one `Runs` can serve a whole frame.
    pub(crate) fn clear(&mut self) {
        self.text.clear();
        self.runs.clear();
        self.lines.clear();
    }

    /// Appends `text` to the line being written, in `style`.
    pub(crate) fn push(&mut self, style: Style, text: &str) {
        self.text.push_str(text);
        self.end_run(style);
    }

    /// Appends the formatted `args` to the line being written, in `style`.
    pub(crate) fn push_fmt(&mut self, style: Style, args: Arguments<'_>) {
        // Writing into a String never fails.
        let _ = self.text.write_fmt(args);
        self.end_run(style);
    }

    /// Appends a space, then the formatted `args` right-aligned in `width` characters as
    /// `{:>width$}` pads a string (never cut), in `style`: what `format!(" {:>width$}")` was.
    pub(crate) fn push_spaced_right(&mut self, style: Style, width: usize, args: Arguments) {
        self.text.push(' ');
        format::push_right_aligned(&mut self.text, width, args);
        self.end_run(style);
    }

    /// Appends text written by `write` into the run's `String`, in `style`.
    pub(crate) fn push_with(&mut self, style: Style, write: impl FnOnce(&mut String)) {
        write(&mut self.text);
        self.end_run(style);
    }

    /// Appends text written by `write`, in the style it returns.
    pub(crate) fn push_styled_by(&mut self, write: impl FnOnce(&mut String) -> Style) {
        let style = write(&mut self.text);
        self.end_run(style);
    }

    /// Appends `gap` (unstyled), then what `write` writes in `style`, when `fits` says yes to
    /// the count of characters written; else nothing. Whether it did.
    pub(crate) fn push_if_fits(
        &mut self,
        gap: &str,
        style: Style,
        write: impl FnOnce(&mut String),
        fits: impl FnOnce(usize) -> bool,
    ) -> bool {
        let start = self.text.len();
        write(&mut self.text);
        if !fits(self.text[start..].chars().count()) {
            self.text.truncate(start);
            return false;
        }
        self.text.insert_str(start, gap);
        self.runs.push((start + gap.len(), Style::new()));
        self.end_run(style);
        true
    }

    fn end_run(&mut self, style: Style) {
        self.runs.push((self.text.len(), style));
    }

    /// Ends the line being written; `style` is the line's, under its runs' own.
    pub(crate) fn end_line(&mut self, style: Style) {
        self.lines.push((self.runs.len(), style));
    }

    /// Each line's runs, as (text, style), and the line's style.
    fn lines(&self) -> impl Iterator<Item = (RunIter<'_>, Style)> {
        let mut first_run = 0;
        self.lines.iter().map(move |&(end, style)| {
            let start = if first_run == 0 {
                0
            } else {
                self.runs[first_run - 1].0
            };
            let runs = RunIter {
                text: &self.text,
                runs: &self.runs[first_run..end],
                start,
            };
            first_run = end;
            (runs, style)
        })
    }

    /// The same lines as ratatui's `Text`, for text that [`Label`] hands to `Paragraph`.
    fn to_text(&self) -> Text<'_> {
        let lines: Vec<Line> = self
            .lines()
            .map(|(runs, style)| {
                let spans: Vec<Span> = runs.map(|(t, s)| Span::styled(t, s)).collect();
                Line::from(spans).style(style)
            })
            .collect();
        Text::from(lines)
    }

    /// Draws the lines in `area` over `style`, as `Label::new(lines).style(style)` would.
    pub(crate) fn render_styled(&self, area: Rect, buf: &mut Buffer, style: Style) {
        self.render_aligned(area, buf, style, Alignment::Left);
    }

    /// [`Runs::render_styled`], each line aligned as `alignment` says, as
    /// `Label::new(lines).style(style).alignment(alignment)` would draw them.
    pub(crate) fn render_aligned(
        &self,
        area: Rect,
        buf: &mut Buffer,
        style: Style,
        alignment: Alignment,
    ) {
        if !self.text.chars().all(is_one_cell) {
            let label = Label::new(self.to_text()).style(style);
            label.alignment(alignment).render(area, buf);
            return;
        }
        let area = area.intersection(buf.area);
        // The default style changes no cell: not worth a walk over the area.
        if style != Style::new() {
            buf.set_style(area, style);
        }
        if area.is_empty() {
            return;
        }
        for ((runs, style), y) in self.lines().zip(area.top()..area.bottom()) {
            put_runs(buf, area, y, runs, Style::new().patch(style), alignment);
        }
    }
}

impl Widget for &Runs {
    fn render(self, area: Rect, buf: &mut Buffer) {
        self.render_styled(area, buf, Style::new());
    }
}

/// One line's runs in [`Runs`], as (text, style).
#[derive(Clone)]
struct RunIter<'a> {
    text: &'a str,
    runs: &'a [(usize, Style)],
    start: usize,
}

impl<'a> Iterator for RunIter<'a> {
    type Item = (&'a str, Style);

    fn next(&mut self) -> Option<Self::Item> {
        let (&(end, style), rest) = self.runs.split_first()?;
        let text = &self.text[self.start..end];
        (self.runs, self.start) = (rest, end);
        Some((text, style))
    }
}

#[cfg(test)]
mod tests {
    use ratatui::style::{Color, Modifier};
    use ratatui::text::Span;

    use super::*;

    /// Two copies of a 12x3 screen with something already on it, which a label must overwrite
    /// or keep as Paragraph does.
    fn two_screens() -> (Buffer, Buffer) {
        let mut base = Buffer::empty(Rect::new(0, 0, 12, 3));
        base.set_string(0, 0, "############", Style::new().bg(Color::Blue));
        (base.clone(), base)
    }

    /// The same text drawn by `Paragraph` and by `Label` over the same buffer.
    fn both(text: &Text<'static>, style: Style, alignment: Alignment, area: Rect) {
        let (mut theirs, mut ours) = two_screens();
        Paragraph::new(text.clone())
            .style(style)
            .alignment(alignment)
            .render(area, &mut theirs);
        Label::new(text.clone())
            .style(style)
            .alignment(alignment)
            .render(area, &mut ours);
        assert_eq!(ours, theirs, "{text:?} {alignment:?} in {area:?}");
    }

    #[test]
    fn every_one_cell_character_draws_as_paragraph_draws_it() {
        let one_cell: String = ('\0'..='\u{2FFF}').filter(|c| is_one_cell(*c)).collect();
        for chunk in one_cell.chars().collect::<Vec<_>>().chunks(10) {
            let chunk: String = chunk.iter().collect();
            // Between ASCII letters, so that a character joined with a neighbour would show.
            let text = Text::from(format!("a{chunk}b"));
            both(&text, Style::new(), Alignment::Left, Rect::new(0, 0, 12, 1));
        }
        for c in one_cell.chars() {
            assert_eq!(unicode_width::UnicodeWidthChar::width(c), Some(1), "{c:?}");
        }
    }

    /// Runs draw what a Label of the same lines draws, through Paragraph or not.
    #[test]
    fn runs_draw_what_a_label_of_their_lines_draws() {
        let bold = Style::new().add_modifier(Modifier::BOLD);
        let red = Style::new().fg(Color::Red);
        for tail in ["plain", "wide 数据", "cut at the right edge of the area"] {
            let mut runs = Runs::default();
            runs.push(red, "ab");
            runs.push(Style::new(), "");
            runs.push_fmt(bold, format_args!(" {tail}"));
            runs.end_line(Style::new().bg(Color::Green));
            runs.end_line(Style::new());
            runs.push_spaced_right(red, 5, format_args!("{}", 42));
            assert!(!runs.push_if_fits("  ", bold, |t| t.push_str("no room"), |_| false));
            assert!(runs.push_if_fits("  ", bold, |t| t.push_str("room"), |_| true));
            runs.end_line(bold);
            let lines = vec![
                Line::from(vec![
                    Span::styled("ab", red),
                    Span::raw(""),
                    Span::styled(format!(" {tail}"), bold),
                ])
                .style(Style::new().bg(Color::Green)),
                Line::default(),
                Line::from(vec![
                    Span::styled("    42", red),
                    Span::raw("  "),
                    Span::styled("room", bold),
                ])
                .style(bold),
            ];
            for area in [Rect::new(0, 0, 12, 3), Rect::new(2, 1, 7, 2)] {
                for style in [Style::new(), Style::new().fg(Color::Cyan)] {
                    let alignments = [Alignment::Left, Alignment::Center, Alignment::Right];
                    for alignment in alignments {
                        let (mut theirs, mut ours) = two_screens();
                        Label::new(lines.clone())
                            .style(style)
                            .alignment(alignment)
                            .render(area, &mut theirs);
                        runs.render_aligned(area, &mut ours, style, alignment);
                        assert_eq!(ours, theirs, "{tail:?} in {area:?}, {alignment:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn draws_what_paragraph_draws() {
        let bold = Style::new().add_modifier(Modifier::BOLD);
        let texts: Vec<Text<'static>> = vec![
            Text::from("GPU  7  OK"),
            Text::from("longer than the twelve cells"),
            Text::from("two\nlines\nand a third that is cut"),
            Text::from(Line::from(vec![
                Span::styled("ab", Style::new().fg(Color::Red)),
                Span::raw(" "),
                Span::styled("cd", bold.bg(Color::Green)),
            ]))
            .style(Style::new().fg(Color::Yellow)),
            Text::from(Line::from("right").right_aligned().style(bold)),
            Text::from(""),
            Text::from("temp 55°C ▂▄█ ├─ ▲▼ ·"),
            // Not one cell a character: through Paragraph itself.
            Text::from("temp 55°C ▂▄█ 数据"),
            Text::from("e\u{301}\u{200d}x"),
            Text::from("tab\there"),
        ];
        let areas = [
            Rect::new(0, 0, 12, 1),
            Rect::new(2, 1, 7, 2),
            Rect::new(3, 0, 0, 1),
            Rect::new(10, 2, 8, 4),
        ];
        for text in &texts {
            for alignment in [Alignment::Left, Alignment::Center, Alignment::Right] {
                for area in areas {
                    both(text, Style::new(), alignment, area);
                    both(
                        text,
                        Style::new().fg(Color::Cyan).bg(Color::Black),
                        alignment,
                        area,
                    );
                }
            }
        }
    }
}
