//! [`Label`]: one or a few lines of text without wrapping, drawn the way ratatui's `Paragraph`
//! draws them, cell for cell, but without its grapheme machinery when every character takes one
//! cell of its own ([`is_one_cell`]: printable ASCII, and the bars, box lines, arrows and signs
//! torchtop draws with). Anything else goes through `Paragraph` itself, so the screen is the
//! same either way; only the cost differs.

use ratatui::{
    buffer::Buffer,
    layout::{Alignment, Rect},
    style::Style,
    text::{Line, Text},
    widgets::{Paragraph, Widget},
};

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
    let total: usize = line.spans.iter().map(|s| s.content.chars().count()).sum();
    let width = u16::try_from(total).unwrap_or(u16::MAX).min(area.width);
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
    let cells = &mut buf.content[start..start + usize::from(width)];
    let line_style = base.patch(line.style);
    let chars = line.spans.iter().flat_map(|span| {
        let style = line_style.patch(span.style);
        span.content.chars().map(move |c| (c, style))
    });
    for (cell, (c, style)) in cells.iter_mut().zip(chars) {
        cell.set_char(c).set_style(style);
    }
}

#[cfg(test)]
mod tests {
    use ratatui::style::{Color, Modifier};
    use ratatui::text::Span;

    use super::*;

    /// The same text drawn by `Paragraph` and by `Label` over the same buffer.
    fn both(text: &Text<'static>, style: Style, alignment: Alignment, area: Rect) {
        let mut base = Buffer::empty(Rect::new(0, 0, 12, 3));
        // Something already on screen, which a label must overwrite or keep as Paragraph does.
        base.set_string(0, 0, "############", Style::new().bg(Color::Blue));
        let (mut theirs, mut ours) = (base.clone(), base);
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
