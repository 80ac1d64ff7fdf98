//! The `[ui]` table of the config file: what the setup screen (F2) chooses (panels, history
//! metrics, hidden columns, refresh rate, theme), where the file lives, and how a change is
//! written back without losing the user's other settings or comments.
//!
//! The rest of the file is checked strictly (a typo in a rule stops the start); the `[ui]` table
//! is not: a garbled one costs the user their screen settings, never the monitor, so it yields
//! the defaults and one sentence for the status line.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The colour scheme (`--theme`, `[ui] theme`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThemeName {
    /// ANSI colours for a dark background.
    #[default]
    Dark,
    /// Darker colours for a light background.
    Light,
    /// No colour at all: bold, reverse, underline and dim only (as `--no-color`).
    Mono,
}

impl ThemeName {
    pub const ALL: [ThemeName; 3] = [ThemeName::Dark, ThemeName::Light, ThemeName::Mono];

    pub fn name(self) -> &'static str {
        match self {
            ThemeName::Dark => "dark",
            ThemeName::Light => "light",
            ThemeName::Mono => "mono",
        }
    }
}

/// The panels the user can hide; the GPU table and the process table always show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Panels {
    /// The clocks/PCIe/throttle/ECC/bus lines under each GPU.
    pub(crate) gpu_details: bool,
    pub(crate) history: bool,
    pub(crate) balance: bool,
    pub(crate) host: bool,
    pub(crate) jobs: bool,
    /// The selected process's allocator panel.
    pub(crate) pytorch: bool,
}

impl Default for Panels {
    fn default() -> Self {
        Panels {
            gpu_details: true,
            history: true,
            balance: true,
            host: true,
            jobs: true,
            pytorch: true,
        }
    }
}

/// The per-GPU figures the history panel can plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum HistoryMetric {
    Util,
    Memory,
    Power,
    Temperature,
    SmClock,
    MemoryClock,
    PcieRx,
    PcieTx,
    Encoder,
    Decoder,
}

impl HistoryMetric {
    pub(crate) const ALL: [HistoryMetric; 10] = [
        HistoryMetric::Util,
        HistoryMetric::Memory,
        HistoryMetric::Power,
        HistoryMetric::Temperature,
        HistoryMetric::SmClock,
        HistoryMetric::MemoryClock,
        HistoryMetric::PcieRx,
        HistoryMetric::PcieTx,
        HistoryMetric::Encoder,
        HistoryMetric::Decoder,
    ];

    /// The name in the config file.
    pub(crate) fn key(self) -> &'static str {
        match self {
            HistoryMetric::Util => "util",
            HistoryMetric::Memory => "memory",
            HistoryMetric::Power => "power",
            HistoryMetric::Temperature => "temperature",
            HistoryMetric::SmClock => "sm_clock",
            HistoryMetric::MemoryClock => "memory_clock",
            HistoryMetric::PcieRx => "pcie_rx",
            HistoryMetric::PcieTx => "pcie_tx",
            HistoryMetric::Encoder => "encoder",
            HistoryMetric::Decoder => "decoder",
        }
    }
}

/// The slowest and fastest refresh the setup screen offers, in seconds.
pub(crate) const REFRESH_CHOICES: [f64; 6] = [0.5, 1.0, 2.0, 3.0, 5.0, 10.0];

/// The `[ui]` table, as the monitor uses it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UiConfig {
    pub theme: ThemeName,
    /// Seconds between refreshes; `None` leaves `--delay`'s default.
    pub(crate) refresh_seconds: Option<f64>,
    pub(crate) panels: Panels,
    /// The history panel's metrics, in the order plotted.
    pub(crate) history: Vec<HistoryMetric>,
    /// Process table columns the user hid, by lowercase title (`"type"`, `"start"`).
    pub(crate) hidden_columns: Vec<String>,
}

/// The process-table columns a new user does not see until the setup screen (F2) shows them,
/// by lowercase title: the GPU shares most jobs leave at 0, and the container.
const HIDDEN_BY_DEFAULT: [&str; 4] = ["gmbw%", "enc%", "dec%", "container"];

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            theme: ThemeName::Dark,
            refresh_seconds: None,
            panels: Panels::default(),
            history: vec![
                HistoryMetric::Util,
                HistoryMetric::Memory,
                HistoryMetric::Power,
            ],
            hidden_columns: HIDDEN_BY_DEFAULT.iter().map(|c| (*c).to_string()).collect(),
        }
    }
}

impl UiConfig {
    /// The `[ui]` value of a parsed file; a garbled one gives the defaults and a sentence, which
    /// names the line and the key when `text`, the file's text, is given.
    pub(crate) fn from_value(
        value: Option<&toml::Value>,
        text: Option<&str>,
    ) -> (UiConfig, Option<String>) {
        let Some(value) = value else {
            return (UiConfig::default(), None);
        };
        let problem = match value.clone().try_into::<UiConfig>() {
            Ok(ui) => match ui.check() {
                Ok(()) => return (ui, None),
                Err((key, problem)) => format!("key `{key}` {problem}"),
            },
            Err(e) => e.message().trim_end().to_string(),
        };
        let located = text.and_then(located_problem).unwrap_or(problem);
        (UiConfig::default(), Some(garbled(&located)))
    }

    /// The checks the types cannot make: the dotted key at fault and what is wrong with it.
    fn check(&self) -> Result<(), (String, String)> {
        match self.refresh_seconds {
            Some(s) if !(0.1..=86_400.0).contains(&s) => Err((
                "ui.refresh_seconds".to_string(),
                format!("is {s}, outside 0.1 to 86400 seconds"),
            )),
            _ => Ok(()),
        }
    }

    /// Writes this `[ui]` table into the config file at `path`, keeping every other table,
    /// key and comment, through a temporary file renamed over the old one so that a crash
    /// never leaves half a file. The error is a sentence for the status line.
    pub(crate) fn save(&self, path: &Path) -> Result<(), String> {
        let shown = crate::format::escape(&path.to_string_lossy()).into_owned();
        let old = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("settings not saved: cannot read {shown}: {e}")),
        };
        let mut doc: toml_edit::DocumentMut = old.parse().map_err(|_| {
            format!("settings not saved: {shown} is not valid TOML; fix or remove it")
        })?;
        self.write_into(&mut doc);
        write_atomically(path, doc.to_string().as_bytes())
            .map_err(|e| format!("settings not saved: cannot write {shown}: {e}"))
    }

    fn write_into(&self, doc: &mut toml_edit::DocumentMut) {
        use toml_edit::{value, Array, Item, Table};
        if !doc.contains_table("ui") {
            let mut table = Table::new();
            table
                .decor_mut()
                .set_prefix("\n# The screen, as the setup screen (F2) saved it.\n");
            doc.insert("ui", Item::Table(table));
        }
        let ui = doc["ui"].as_table_mut().expect("ui was made a table above");
        ui["theme"] = value(self.theme.name());
        match self.refresh_seconds {
            Some(s) => ui["refresh_seconds"] = value(s),
            None => {
                ui.remove("refresh_seconds");
            }
        }
        let history: Array = self.history.iter().map(|m| m.key()).collect();
        ui["history"] = value(history);
        let hidden: Array = self.hidden_columns.iter().map(String::as_str).collect();
        ui["hidden_columns"] = value(hidden);
        if !ui.contains_table("panels") {
            ui.insert("panels", Item::Table(Table::new()));
        }
        let panels = ui["panels"]
            .as_table_mut()
            .expect("panels was made a table");
        let p = self.panels;
        for (key, shown) in [
            ("gpu_details", p.gpu_details),
            ("history", p.history),
            ("balance", p.balance),
            ("host", p.host),
            ("jobs", p.jobs),
            ("pytorch", p.pytorch),
        ] {
            panels[key] = value(shown);
        }
    }
}

/// The status line's sentence: what is wrong first, so that a narrow terminal still shows
/// the line and the key.
fn garbled(problem: &str) -> String {
    format!(
        "config [ui] not used: {problem}; the screen has its default settings until that is \
         mended (F2 will not save over it)"
    )
}

/// Where a garbled `[ui]` table goes wrong, as the strict reader says it ("line 2: key
/// `ui.theme` unknown variant ..."); the rest of the file was read already, so only the table
/// is looked at here.
fn located_problem(text: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct UiOnly {
        #[serde(default)]
        ui: Option<UiConfig>,
    }
    crate::config::parse::<UiOnly>(text, |file| {
        file.ui.as_ref().map_or(Ok(()), UiConfig::check)
    })
    .err()
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    make_directories_checked(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Makes the missing directories of `dir` one at a time, each checked as it is made: root must
/// not create a directory through a path that another user's directory or symlink leads, nor
/// through one planted in a sticky directory (such as /tmp) after the check of its parent (a
/// symlink there makes `mkdir` fail with "exists", and the check then refuses it).
fn make_directories_checked(dir: &Path) -> std::io::Result<()> {
    let missing: Vec<&Path> = (dir.ancestors())
        .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
        .collect();
    let existing = (dir.ancestors().nth(missing.len()))
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    crate::sys::refuse_unsafe_directory(existing)?;
    for step in missing.iter().rev() {
        match std::fs::create_dir(step) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => crate::sys::refuse_unsafe_directory(step)?,
        }
    }
    crate::sys::refuse_unsafe_directory(dir)
}

/// `$XDG_CONFIG_HOME/torchtop/config.toml`, or `~/.config/torchtop/config.toml`; `None`
/// when neither variable is set.
pub fn default_path() -> Option<PathBuf> {
    let nonempty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let base = nonempty("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("torchtop").join("config.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ui_of(text: &str) -> (UiConfig, Option<String>) {
        let table: toml::Table = toml::from_str(text).expect("the rest parses");
        UiConfig::from_value(table.get("ui"), Some(text))
    }

    #[test]
    fn a_missing_table_gives_the_defaults_without_a_word() {
        assert_eq!(ui_of(""), (UiConfig::default(), None));
    }

    #[test]
    fn a_written_table_is_read_back() {
        let (ui, problem) = ui_of(
            "[ui]\ntheme = \"light\"\nrefresh_seconds = 2.0\nhistory = [\"temperature\"]\n\
             hidden_columns = [\"type\"]\n[ui.panels]\nhost = false\n",
        );
        assert_eq!(problem, None);
        assert_eq!(ui.theme, ThemeName::Light);
        assert_eq!(ui.refresh_seconds, Some(2.0));
        assert_eq!(ui.history, [HistoryMetric::Temperature]);
        assert_eq!(ui.hidden_columns, ["type"]);
        assert!(!ui.panels.host && ui.panels.balance);
    }

    #[test]
    fn a_garbled_table_gives_the_defaults_and_a_sentence_naming_the_line_and_key() {
        for (text, starts) in [
            (
                "ui = 5\n",
                "config [ui] not used: line 1: key `ui`: invalid type",
            ),
            (
                "# mine\n[ui]\ntheme = \"neon\"\n",
                "config [ui] not used: line 3: key `ui.theme`: unknown variant `neon`",
            ),
            (
                "[rules.leak]\nwindow_seconds = 30\n[ui]\nrefresh_seconds = -1\n",
                "config [ui] not used: line 4: key `ui.refresh_seconds` is -1, outside 0.1",
            ),
            (
                "[ui]\ncolour = 1\n",
                "config [ui] not used: line 2: key `ui.colour`: unknown field",
            ),
            (
                "[ui.panels]\nhost = \"no\"\n",
                "config [ui] not used: line 2: key `ui.panels.host`: invalid type",
            ),
        ] {
            let (ui, problem) = ui_of(text);
            assert_eq!(ui, UiConfig::default(), "{text}");
            let problem = problem.expect(text);
            assert!(problem.starts_with(starts), "{problem}");
            assert!(problem.ends_with("(F2 will not save over it)"), "{problem}");
        }
        // Without the text (a table built in memory) the sentence says what, not where.
        let value: toml::Value = toml::from_str("theme = \"neon\"").unwrap();
        let (_, problem) = UiConfig::from_value(Some(&value), None);
        assert!(problem
            .unwrap()
            .starts_with("config [ui] not used: unknown variant `neon`"));
    }

    #[test]
    fn saving_keeps_other_tables_and_comments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("torchtop").join("config.toml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let before = "# my thresholds\n[rules.leak]\nwindow_seconds = 30 # short\n";
        std::fs::write(&path, before).unwrap();
        let ui = UiConfig {
            theme: ThemeName::Mono,
            refresh_seconds: Some(2.0),
            ..UiConfig::default()
        };
        ui.save(&path).unwrap();
        let after = std::fs::read_to_string(&path).unwrap();
        assert!(after.starts_with(before), "{after}");
        let table: toml::Table = crate::config::load(&path, |_: &toml::Table| Ok(())).unwrap();
        assert_eq!(
            table["rules"]["leak"]["window_seconds"].as_integer(),
            Some(30)
        );
        assert_eq!(
            UiConfig::from_value(table.get("ui"), None),
            (ui.clone(), None)
        );
        // A second save replaces the table instead of adding one.
        let again = UiConfig {
            theme: ThemeName::Light,
            ..ui
        };
        again.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.matches("[ui]").count(), 1, "{text}");
        assert!(text.contains("theme = \"light\""), "{text}");
    }

    #[test]
    fn a_file_that_cannot_be_written_gives_a_sentence() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: no rename can replace it, even as root.
        let path = dir.path().join("config.toml");
        std::fs::create_dir(&path).unwrap();
        let error = UiConfig::default().save(&path).unwrap_err();
        assert!(error.starts_with("settings not saved: "), "{error}");
        let garbled = dir.path().join("bad.toml");
        std::fs::write(&garbled, "[[[").unwrap();
        let error = UiConfig::default().save(&garbled).unwrap_err();
        assert!(error.contains("not valid TOML"), "{error}");
        assert_eq!(std::fs::read_to_string(&garbled).unwrap(), "[[[");
    }

    #[test]
    fn the_default_path_follows_xdg() {
        // Read only: the variables are whatever the test run has.
        if let Some(path) = default_path() {
            assert!(path.ends_with("torchtop/config.toml"));
        }
    }

    #[test]
    fn root_never_saves_into_a_directory_another_user_owns() {
        let scratch = tempfile::tempdir().unwrap();
        let Some(theirs) = crate::test_ci::directory_of_nobody(scratch.path()) else {
            return;
        };
        let path = theirs.join("torchtop").join("config.toml");
        let error = UiConfig::default().save(&path).unwrap_err();
        assert!(error.contains("belongs to another user"), "{error}");
        assert!(!path.exists());
        // The same save into a directory of our own works.
        let ours = scratch.path().join("ours").join("config.toml");
        UiConfig::default().save(&ours).unwrap();
        assert!(ours.exists());
    }

    /// The missing directories are made one at a time, each checked.
    #[test]
    fn a_save_makes_every_missing_directory() {
        let scratch = tempfile::tempdir().unwrap();
        let deep = scratch.path().join("a").join("b").join("config.toml");
        UiConfig::default().save(&deep).unwrap();
        assert!(deep.exists());
    }

    /// A review: a symlink in another user's directory, leading to root's, passed the check
    /// (made on the resolved path), and the directories were created through it before it.
    #[test]
    fn root_never_saves_or_makes_directories_through_another_users_symlink() {
        let scratch = tempfile::tempdir().unwrap();
        let Some(theirs) = crate::test_ci::directory_of_nobody(scratch.path()) else {
            return;
        };
        let roots = scratch.path().join("roots");
        std::fs::create_dir(&roots).unwrap();
        std::os::unix::fs::symlink(&roots, theirs.join("link")).unwrap();
        let path = theirs.join("link").join("torchtop").join("config.toml");
        let error = UiConfig::default().save(&path).unwrap_err();
        assert!(error.contains("belongs to another user"), "{error}");
        assert!(
            !roots.join("torchtop").exists(),
            "nothing made through the link"
        );
    }
}
