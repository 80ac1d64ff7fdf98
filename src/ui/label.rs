//! [`Label`]: one or a few lines of text without wrapping, drawn the way ratatui's `Paragraph`
//! draws them, cell for cell, but without its grapheme machinery when every character takes one
//! cell of its own ([`is_one_cell`]: printable ASCII, and the bars, box lines, arrows and signs
//! torchtop draws with). Anything else goes through `Paragraph` itself, so the screen is the
//! same either way; only the cost differs.
//!
//! One thing differs from `Paragraph`, on both paths alike: a line cut at the right edge of its
//! area ends in [`CUT_MARK`] when real text was cut off ([`mark_cut`]), as htop and nvitop mark
//! it, so that a reader can tell the sentence goes on.

use ratatui::{
    buffer::{Buffer, CellWidth},
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
/// the cut mark; arrows; box drawing, block elements and geometric shapes (not U+25FD and
/// U+25FE, which are emoji two columns wide). A test checks each against ratatui's own drawing.
pub(crate) fn is_one_cell(c: char) -> bool {
    matches!(
        c,
        ' '..='~'
            | '\u{A1}'..='\u{AC}'
            | '\u{AE}'..='\u{FF}'
            | CUT_MARK
            | '\u{2190}'..='\u{21FF}'
            | '\u{2500}'..='\u{25FC}'
    )
}

impl Widget for Label<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if !self.is_one_cell_text() {
            let area = area.intersection(buf.area);
            let lines = usize::from(area.height);
            let cut = |line: &Line| line_loses_text(line, area.width);
            // `Paragraph` takes the text; a copy for the marks only in a frame with a cut line.
            let cut_lines =
                (self.text.lines.iter().take(lines).any(cut)).then(|| self.text.lines.clone());
            Paragraph::new(self.text)
                .style(self.style)
                .alignment(self.alignment)
                .render(area, buf);
            let cut_lines = cut_lines.iter().flatten().zip(area.top()..area.bottom());
            for (_, y) in cut_lines.filter(|(line, _)| cut(line)) {
                mark_cut(buf, area, y);
            }
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
/// area's width (the cut marked by [`mark_cut`] where text was lost), placed as `Paragraph`
/// places a line (the offset from the cut width).
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
    let mut runs = runs;
    while let Some((text, style)) = runs.next() {
        let style = line_style.patch(style);
        // No more characters than cells are taken: what is left of `chars` was cut off.
        let mut chars = text.chars();
        for (c, cell) in chars.by_ref().take(cells.len()).zip(cells.by_ref()) {
            cell.set_char(c).set_style(style);
        }
        if cells.len() == 0 {
            // Every cell taken: the line is at least as wide as the area and starts at its left
            // edge, whatever its alignment, so what is left of it was cut at the right edge.
            let mut rest = chars.chain(runs.flat_map(|(text, _)| text.chars()));
            if rest.any(|c| c != ' ') {
                mark_cut(buf, area, y);
            }
            return;
        }
    }
}

/// What a line cut at the right edge of its area ends in, in its last cell (U+2026, one column
/// wide): htop's and nvitop's mark, which tells the reader that the text goes on.
pub(crate) const CUT_MARK: char = '…';

/// Puts [`CUT_MARK`] in the last cell of row `y` of `area`, in the style that cell has: the
/// line there was cut at the area's right edge. A wide character just before that cell covers
/// it (a terminal draws the character over both, and ratatui's diff skips the covered cell), so
/// the character gives way to a space there.
pub(crate) fn mark_cut(buf: &mut Buffer, area: Rect, y: u16) {
    if area.is_empty() {
        return;
    }
    let x = area.right() - 1;
    if x > area.left() {
        let before = &mut buf[(x - 1, y)];
        if before.symbol().cell_width() > 1 {
            before.set_char(' ');
        }
    }
    buf[(x, y)].set_char(CUT_MARK);
}

/// Whether a line of `graphemes`, drawn from the left edge of `width` cells as ratatui draws
/// one (up to the first grapheme that does not fit), loses anything but spaces: real text cut
/// off, which [`mark_cut`] marks. A line cut only in trailing spaces has lost nothing to read.
fn loses_text<'g>(graphemes: impl Iterator<Item = &'g str>, width: u16) -> bool {
    let mut graphemes = graphemes;
    let mut used = 0u16;
    let is_text = |g: &str| g.chars().any(|c| c != ' ');
    while let Some(g) = graphemes.next() {
        let w = g.cell_width();
        if used.saturating_add(w) > width {
            return is_text(g) || graphemes.any(is_text);
        }
        used += w;
    }
    false
}

/// [`loses_text`] of the graphemes ratatui draws of `line` (it drops control characters).
pub(crate) fn line_loses_text(line: &Line, width: u16) -> bool {
    loses_text(line.styled_graphemes(Style::new()).map(|g| g.symbol), width)
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
    use unicode_width::UnicodeWidthStr;

    use super::*;

    /// Two copies of a 12x3 screen with something already on it, which a label must overwrite
    /// or keep as Paragraph does.
    fn two_screens() -> (Buffer, Buffer) {
        let mut base = Buffer::empty(Rect::new(0, 0, 12, 3));
        base.set_string(0, 0, "############", Style::new().bg(Color::Blue));
        (base.clone(), base)
    }

    /// The same text drawn by `Paragraph` (with the cut marks, [`paragraph_with_marks`]) and by
    /// `Label` over the same buffer.
    fn both(text: &Text<'static>, style: Style, alignment: Alignment, area: Rect) {
        let (mut theirs, mut ours) = two_screens();
        paragraph_with_marks(text, style, alignment, area, &mut theirs);
        Label::new(text.clone())
            .style(style)
            .alignment(alignment)
            .render(area, &mut ours);
        assert_eq!(ours, theirs, "{text:?} {alignment:?} in {area:?}");
    }

    /// What `Label` should draw: `Paragraph`'s drawing, then the cut mark on each line that
    /// loses text, found apart from [`loses_text`]: the line drawn again with room to spare
    /// has something past the area's width, or a wide character across its edge.
    fn paragraph_with_marks(
        text: &Text<'static>,
        style: Style,
        alignment: Alignment,
        area: Rect,
        buf: &mut Buffer,
    ) {
        Paragraph::new(text.clone())
            .style(style)
            .alignment(alignment)
            .render(area, buf);
        let area = area.intersection(buf.area);
        for (line, y) in text.lines.iter().zip(area.top()..area.bottom()) {
            let mut roomy = Buffer::empty(Rect::new(0, 0, 200, 1));
            Paragraph::new(line.clone().left_aligned()).render(roomy.area, &mut roomy);
            let w = area.width;
            let across = w > 0 && roomy[(w - 1, 0)].symbol().width() > 1;
            let past = (w..200).any(|x| roomy[(x, 0)].symbol() != " ");
            if area.is_empty() || !(across || past) {
                continue;
            }
            let last = area.right() - 1;
            if last > area.left() && buf[(last - 1, y)].symbol().width() > 1 {
                buf[(last - 1, y)].set_symbol(" ");
            }
            buf[(last, y)].set_symbol("…");
        }
    }

    /// The symbols of row `y` of `buf`, joined.
    fn row(buf: &Buffer, y: u16) -> String {
        let area = buf.area;
        (area.left()..area.right())
            .map(|x| buf[(x, y)].symbol())
            .collect()
    }

    /// `text` drawn by a `Label` in a screen `width` cells wide and one high.
    fn label_row(text: impl Into<Text<'static>>, width: u16, alignment: Alignment) -> Buffer {
        let mut buf = Buffer::empty(Rect::new(0, 0, width, 1));
        Label::new(text)
            .alignment(alignment)
            .render(buf.area, &mut buf);
        buf
    }

    #[test]
    fn a_line_cut_off_ends_in_the_mark_in_its_last_cell() {
        let alignments = [Alignment::Left, Alignment::Center, Alignment::Right];
        for alignment in alignments {
            // The one-cell path and Paragraph's (wide characters).
            let cut = label_row("in use (98%): a process that allocates", 12, alignment);
            assert_eq!(row(&cut, 0), "in use (98%…", "{alignment:?}");
            let wide = label_row("数据 longer than the area", 12, alignment);
            assert_eq!(row(&wide, 0), "数 据  longer…", "{alignment:?}");
        }
        // The mark takes the style of the cell it replaces: the cut text's.
        let red = Style::new().fg(Color::Red);
        let line = Line::from(vec![Span::raw("plain "), Span::styled("red text", red)]);
        let styled = label_row(line, 10, Alignment::Left);
        assert_eq!(row(&styled, 0), "plain red…");
        assert_eq!(styled[(9, 0)].fg, Color::Red);
        // A wide character across the last cell gives way to a space: a terminal would draw
        // it over the mark.
        assert_eq!(row(&label_row("ab数据", 4, Alignment::Left), 0), "ab …");
        assert_eq!(row(&label_row("数据", 1, Alignment::Left), 0), "…");
        // Runs, on the one-cell path and Paragraph's.
        for (text, shown) in [
            ("the host strip ends", "the host s…"),
            ("数据 wide one", "数 据  wide …"),
        ] {
            let mut runs = Runs::default();
            runs.push(Style::new(), text);
            runs.end_line(Style::new());
            let mut buf = Buffer::empty(Rect::new(0, 0, 11, 1));
            runs.render_styled(buf.area, &mut buf, Style::new());
            assert_eq!(row(&buf, 0), shown);
        }
    }

    #[test]
    fn a_line_cut_only_in_trailing_spaces_is_unchanged() {
        for alignment in [Alignment::Left, Alignment::Center, Alignment::Right] {
            let spaces = label_row("twelve cells     ", 12, alignment);
            assert_eq!(row(&spaces, 0), "twelve cells", "{alignment:?}");
            let wide = label_row("数据 ten c   ", 10, alignment);
            assert_eq!(row(&wide, 0), "数 据  ten c", "{alignment:?}");
            let fits = label_row("fits", 12, alignment);
            assert!(!row(&fits, 0).contains('…'), "{alignment:?}");
        }
        let mut runs = Runs::default();
        runs.push(Style::new(), "exactly ten");
        runs.push(Style::new().fg(Color::Red), "   ");
        runs.end_line(Style::new());
        let mut buf = Buffer::empty(Rect::new(0, 0, 11, 1));
        runs.render_styled(buf.area, &mut buf, Style::new());
        assert_eq!(row(&buf, 0), "exactly ten");
    }

    /// A one-cell text, and the same text behind a control character that ratatui drops (which
    /// sends it through `Paragraph`), draw the same cells, cut marks and all.
    #[test]
    fn the_one_cell_path_and_the_paragraph_path_mark_alike() {
        let texts = [
            "GPU 0 has 78.1GiB of 79.6GiB in use",
            "cut only in spaces      ",
            "fits",
            "",
            "exactly twelve!",
        ];
        for text in texts {
            let through_paragraph = format!("\u{7}{text}");
            assert!(text.chars().all(is_one_cell));
            assert!(!through_paragraph.chars().all(is_one_cell));
            for width in [0, 1, 5, 12, 15, 40] {
                for alignment in [Alignment::Left, Alignment::Center, Alignment::Right] {
                    let fast = label_row(text, width, alignment);
                    let slow = label_row(through_paragraph.clone(), width, alignment);
                    assert_eq!(fast, slow, "{text:?} in {width}, {alignment:?}");
                }
            }
        }
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
            // Cut only in trailing spaces, and across a wide character.
            Text::from("twelve cells      "),
            Text::from("ab数据 and more"),
            Text::from(Line::from("cut off at the right").right_aligned()),
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
