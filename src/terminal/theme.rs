//! Colours and text styles, for the three themes ([`ThemeName`]): `dark` and `light` use ANSI
//! colours chosen for that background, `mono` (also `--no-color` and NO_COLOR) uses modifiers
//! only, so the screen stays readable on a monochrome terminal.
//!
//! Secondary text is the default foreground with DIM, never ANSI colour 8 (DarkGray), which
//! vanishes on Solarized-Dark-like palettes; a test checks that no theme style uses it.
//! Load colours follow nvitop's classes: light, moderate and heavy.

use ratatui::style::{Color, Modifier, Style};

pub(crate) use crate::config::ThemeName;
use crate::model::Severity;

/// Below this share a GPU is lightly loaded (green); from it, moderately (yellow).
const LOAD_MODERATE: f64 = 0.10;
/// From this share a GPU is heavily loaded (red).
const LOAD_HEAVY: f64 = 0.75;
/// Memory fills from the memory colour to yellow at this share, then red at [`MEMORY_FULL`].
/// PyTorch's caching allocator holds most of a device in normal use, hence the high marks.
const MEMORY_FILLING: f64 = 0.60;
const MEMORY_FULL: f64 = 0.90;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Theme {
    name: ThemeName,
}

impl Theme {
    /// The dark theme, or mono without colours.
    pub(crate) fn new(colors: bool) -> Self {
        Theme::named(if colors {
            ThemeName::Dark
        } else {
            ThemeName::Mono
        })
    }

    pub(crate) fn named(name: ThemeName) -> Self {
        Theme { name }
    }

    /// One style per theme.
    fn pick(self, dark: Style, light: Style, mono: Style) -> Style {
        match self.name {
            ThemeName::Dark => dark,
            ThemeName::Light => light,
            ThemeName::Mono => mono,
        }
    }

    /// The same colour on dark and light backgrounds, plain in mono.
    fn colored(self, color: Color) -> Style {
        let style = Style::new().fg(color);
        self.pick(style, style, Style::new())
    }

    #[allow(
        clippy::unused_self,
        reason = "every style is asked of the theme, even the same ones"
    )]
    pub(crate) fn plain(self) -> Style {
        Style::new()
    }

    pub(crate) fn brand(self) -> Style {
        let bold = Style::new().add_modifier(Modifier::BOLD);
        self.pick(bold.fg(Color::Green), bold.fg(Color::Blue), bold)
    }

    /// Section title lines and table headers.
    pub(crate) fn title(self) -> Style {
        self.pick(
            Style::new().fg(Color::Black).bg(Color::Cyan),
            Style::new().fg(Color::White).bg(Color::Blue),
            Style::new().add_modifier(Modifier::REVERSED),
        )
    }

    pub(crate) fn label(self) -> Style {
        self.pick(
            Style::new().fg(Color::Cyan),
            Style::new().fg(Color::Blue),
            Style::new(),
        )
    }

    /// Secondary text: the default foreground, dimmed, in every theme.
    #[allow(
        clippy::unused_self,
        reason = "every style is asked of the theme, even the same ones"
    )]
    pub(crate) fn dim(self) -> Style {
        Style::new().add_modifier(Modifier::DIM)
    }

    pub(crate) fn selected(self) -> Style {
        self.pick(
            Style::new().bg(Color::Blue).fg(Color::White),
            Style::new().bg(Color::Cyan).fg(Color::Black),
            Style::new().add_modifier(Modifier::REVERSED),
        )
    }

    /// Rows tagged with Space.
    pub(crate) fn tagged(self) -> Style {
        let bold = Style::new().add_modifier(Modifier::BOLD);
        self.pick(
            bold.fg(Color::Yellow),
            bold.fg(Color::Magenta),
            bold.add_modifier(Modifier::UNDERLINED),
        )
    }

    pub(crate) fn good(self) -> Style {
        self.colored(Color::Green)
    }

    pub(crate) fn warn(self) -> Style {
        self.pick(
            Style::new().fg(Color::Yellow),
            // Yellow is unreadable on white; a dark orange (256-colour 130) reads as amber.
            Style::new().fg(Color::Indexed(130)),
            Style::new().add_modifier(Modifier::BOLD),
        )
    }

    pub(crate) fn critical(self) -> Style {
        let bold = Style::new().add_modifier(Modifier::BOLD);
        self.pick(
            bold.fg(Color::Red),
            bold.fg(Color::Red),
            bold.add_modifier(Modifier::REVERSED),
        )
    }

    pub(crate) fn memory_bar(self) -> Style {
        self.colored(Color::Magenta)
    }

    pub(crate) fn utilization_bar(self) -> Style {
        self.colored(Color::Green)
    }

    pub(crate) fn power_bar(self) -> Style {
        self.pick(
            Style::new().fg(Color::Yellow),
            Style::new().fg(Color::Indexed(130)),
            Style::new(),
        )
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

    /// A utilization share by load class, as nvitop colours it: light green, moderate
    /// yellow, heavy red (not bold: a busy GPU is the normal case, not an alarm).
    pub(crate) fn load(self, fraction: Option<f64>) -> Style {
        match fraction {
            Some(f) if f >= LOAD_HEAVY => self.colored(Color::Red),
            Some(f) if f >= LOAD_MODERATE => self.warn(),
            Some(_) => self.good(),
            None => self.dim(),
        }
    }

    /// A memory bar as it fills: the memory colour, then yellow, then red.
    pub(crate) fn memory_fill(self, fraction: Option<f64>) -> Style {
        match fraction {
            Some(f) if f >= MEMORY_FULL => self.colored(Color::Red),
            Some(f) if f >= MEMORY_FILLING => self.warn(),
            Some(_) => self.memory_bar(),
            None => self.dim(),
        }
    }

    /// A GPU line held at its power cap (a warning) or its thermal limit (critical).
    pub(crate) fn limited(self, thermal: bool) -> Style {
        if thermal {
            self.critical()
        } else {
            self.pick(
                Style::new().fg(Color::Black).bg(Color::Yellow),
                Style::new().fg(Color::Black).bg(Color::Indexed(214)),
                Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            )
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
        let badge = Style::new().fg(Color::Black).add_modifier(Modifier::BOLD);
        self.pick(
            badge.bg(Color::Yellow),
            badge.bg(Color::Indexed(214)),
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD),
        )
    }

    /// Every style the theme can give, for the checks that no theme uses colour 8.
    #[cfg(test)]
    pub(crate) fn all_styles(self) -> Vec<Style> {
        let fractions = [None, Some(0.0), Some(0.5), Some(0.85), Some(0.99)];
        let mut styles = vec![
            self.plain(),
            self.brand(),
            self.title(),
            self.label(),
            self.dim(),
            self.selected(),
            self.tagged(),
            self.good(),
            self.warn(),
            self.critical(),
            self.memory_bar(),
            self.utilization_bar(),
            self.power_bar(),
            self.limited(true),
            self.limited(false),
            self.readonly_badge(),
        ];
        for f in fractions {
            styles.extend([self.level(f), self.load(f), self.memory_fill(f)]);
        }
        for t in [None, Some(40), Some(80), Some(90)] {
            styles.push(self.temperature(t));
        }
        for s in [Severity::Info, Severity::Warn, Severity::Critical] {
            styles.push(self.severity(s));
        }
        styles
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ANSI colour 8 by any of its names.
    fn is_dark_gray(color: Option<Color>) -> bool {
        matches!(color, Some(Color::DarkGray | Color::Indexed(8)))
    }

    #[test]
    fn no_theme_uses_ansi_colour_8() {
        for name in ThemeName::ALL {
            for style in Theme::named(name).all_styles() {
                assert!(!is_dark_gray(style.fg), "{name:?}: {style:?}");
                assert!(!is_dark_gray(style.bg), "{name:?}: {style:?}");
            }
        }
    }

    /// Every style is meant to come from the theme: no file under src/ names colour 8 itself.
    /// (The two files that test for it name it to look for it, and are left out.)
    #[test]
    fn no_source_file_names_ansi_colour_8() {
        let checkers = ["terminal/theme.rs", "ui/setup_tests.rs"];
        let mut stack = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")];
        let mut offenders = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let named = text.contains("DarkGray") || text.contains("Indexed(8)");
                if named && !checkers.iter().any(|c| path.ends_with(c)) {
                    offenders.push(path.display().to_string());
                }
            }
        }
        assert!(offenders.is_empty(), "ANSI colour 8 named in {offenders:?}");
    }

    #[test]
    fn mono_has_no_colour_at_all() {
        for style in Theme::named(ThemeName::Mono).all_styles() {
            assert_eq!((style.fg, style.bg), (None, None), "{style:?}");
        }
        assert_eq!(Theme::new(false), Theme::named(ThemeName::Mono));
    }

    #[test]
    fn load_and_memory_classes() {
        let t = Theme::named(ThemeName::Dark);
        assert_eq!(t.load(Some(0.05)).fg, Some(Color::Green));
        assert_eq!(t.load(Some(0.5)).fg, Some(Color::Yellow));
        assert_eq!(t.load(Some(0.9)).fg, Some(Color::Red));
        assert_eq!(t.memory_fill(Some(0.3)).fg, Some(Color::Magenta));
        assert_eq!(t.memory_fill(Some(0.7)).fg, Some(Color::Yellow));
        assert_eq!(t.memory_fill(Some(0.95)).fg, Some(Color::Red));
    }
}
