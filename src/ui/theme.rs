//! Colours and text styles. With colours off (NO_COLOR) every style is made of modifiers only,
//! so the screen stays readable on a monochrome terminal.

use ratatui::style::{Color, Modifier, Style};

use crate::model::{GpuState, Severity};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    colors: bool,
}

impl Theme {
    pub fn new(colors: bool) -> Self {
        Theme { colors }
    }

    fn pick(self, colored: Style, plain: Style) -> Style {
        if self.colors {
            colored
        } else {
            plain
        }
    }

    pub fn plain(self) -> Style {
        Style::new()
    }

    pub fn brand(self) -> Style {
        self.pick(
            Style::new().fg(Color::Green).add_modifier(Modifier::BOLD),
            Style::new().add_modifier(Modifier::BOLD),
        )
    }

    /// Section title lines and table headers.
    pub fn title(self) -> Style {
        self.pick(
            Style::new().fg(Color::Black).bg(Color::Cyan),
            Style::new().add_modifier(Modifier::REVERSED),
        )
    }

    pub fn label(self) -> Style {
        self.pick(Style::new().fg(Color::Cyan), Style::new())
    }

    pub fn dim(self) -> Style {
        self.pick(
            Style::new().fg(Color::DarkGray),
            Style::new().add_modifier(Modifier::DIM),
        )
    }

    pub fn selected(self) -> Style {
        self.pick(
            Style::new().bg(Color::Blue).fg(Color::White),
            Style::new().add_modifier(Modifier::REVERSED),
        )
    }

    /// Rows tagged with Space.
    pub fn tagged(self) -> Style {
        self.pick(
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
        )
    }

    pub fn good(self) -> Style {
        self.pick(Style::new().fg(Color::Green), Style::new())
    }

    pub fn warn(self) -> Style {
        self.pick(
            Style::new().fg(Color::Yellow),
            Style::new().add_modifier(Modifier::BOLD),
        )
    }

    pub fn critical(self) -> Style {
        self.pick(
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED),
        )
    }

    pub fn memory_bar(self) -> Style {
        self.pick(Style::new().fg(Color::Magenta), Style::new())
    }

    pub fn utilization_bar(self) -> Style {
        self.pick(Style::new().fg(Color::Green), Style::new())
    }

    pub fn power_bar(self) -> Style {
        self.pick(Style::new().fg(Color::Yellow), Style::new())
    }

    /// A fill level: calm below 80%, a warning up to 95%, critical above.
    pub fn level(self, fraction: Option<f64>) -> Style {
        match fraction {
            Some(f) if f >= 0.95 => self.critical(),
            Some(f) if f >= 0.80 => self.warn(),
            Some(_) => self.good(),
            None => self.dim(),
        }
    }

    pub fn temperature(self, celsius: Option<u32>) -> Style {
        match celsius {
            Some(t) if t >= 85 => self.critical(),
            Some(t) if t >= 75 => self.warn(),
            Some(_) => self.plain(),
            None => self.dim(),
        }
    }

    pub fn gpu_state(self, state: GpuState) -> Style {
        match state {
            GpuState::Ok => self.good(),
            GpuState::Stale => self.warn(),
            GpuState::Lost => self.critical(),
        }
    }

    pub fn severity(self, severity: Severity) -> Style {
        match severity {
            Severity::Info => self.label(),
            Severity::Warn => self.warn(),
            Severity::Critical => self.critical(),
        }
    }

    pub fn readonly_badge(self) -> Style {
        self.pick(
            Style::new()
                .fg(Color::Black)
                .bg(Color::Yellow)
                .add_modifier(Modifier::BOLD),
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD),
        )
    }
}
