//! Colours and text styles. With colours off (NO_COLOR) every style is made of modifiers only,
//! so the screen stays readable on a monochrome terminal.

use ratatui::style::{Color, Modifier, Style};

use crate::model::Severity;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Theme {
    colors: bool,
}

impl Theme {
    pub(crate) fn new(colors: bool) -> Self {
        Theme { colors }
    }

    fn pick(self, colored: Style, plain: Style) -> Style {
        if self.colors {
            colored
        } else {
            plain
        }
    }

    pub(crate) fn plain(self) -> Style {
        Style::new()
    }

    pub(crate) fn brand(self) -> Style {
        self.pick(
            Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
            Style::new().add_modifier(Modifier::BOLD),
        )
    }

    /// Section title lines and table headers.
    pub(crate) fn title(self) -> Style {
        self.pick(
            Style::new().fg(Color::Black).bg(Color::Cyan),
            Style::new().add_modifier(Modifier::REVERSED),
        )
    }

    pub(crate) fn label(self) -> Style {
        self.pick(Style::new().fg(Color::Cyan), Style::new())
    }

    pub(crate) fn dim(self) -> Style {
        self.pick(
            Style::new().fg(Color::DarkGray),
            Style::new().add_modifier(Modifier::DIM),
        )
    }

    pub(crate) fn selected(self) -> Style {
        self.pick(
            Style::new().bg(Color::Blue).fg(Color::White),
            Style::new().add_modifier(Modifier::REVERSED),
        )
    }

    /// Rows tagged with Space.
    pub(crate) fn tagged(self) -> Style {
        self.pick(
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
        )
    }

    pub(crate) fn good(self) -> Style {
        self.pick(Style::new().fg(Color::Green), Style::new())
    }

    pub(crate) fn warn(self) -> Style {
        self.pick(
            Style::new().fg(Color::Yellow),
            Style::new().add_modifier(Modifier::BOLD),
        )
    }

    pub(crate) fn critical(self) -> Style {
        self.pick(
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED),
        )
    }

    pub(crate) fn memory_bar(self) -> Style {
        self.pick(Style::new().fg(Color::Magenta), Style::new())
    }

    pub(crate) fn utilization_bar(self) -> Style {
        self.pick(Style::new().fg(Color::Green), Style::new())
    }

    pub(crate) fn power_bar(self) -> Style {
        self.pick(Style::new().fg(Color::Yellow), Style::new())
    }

    /// A fill level: calm below 80%, a warning up to 95%, critical above.
    pub(crate) fn level(self, fraction: Option<f64>) -> Style {
        match fraction {
            Some(f) if f >= 0.95 => self.critical(),
            Some(f) if f >= 0.80 => self.warn(),
            Some(_) => self.good(),
            None => self.dim(),
        }
    }

    pub(crate) fn temperature(self, celsius: Option<u32>) -> Style {
        match celsius {
            Some(t) if t >= 85 => self.critical(),
            Some(t) if t >= 75 => self.warn(),
            Some(_) => self.plain(),
            None => self.dim(),
        }
    }

    pub(crate) fn severity(self, severity: Severity) -> Style {
        match severity {
            Severity::Info => self.label(),
            Severity::Warn => self.warn(),
            Severity::Critical => self.critical(),
        }
    }

    pub(crate) fn readonly_badge(self) -> Style {
        self.pick(
            Style::new()
                .fg(Color::Black)
                .bg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD),
        )
    }
}
