//! The columns of the process table: their titles, widths and sort keys, and which of them fit
//! a given width. The app owns this (not the drawing code) because header clicks and the
//! sideways scroll of COMMAND need the same x positions the table is drawn with.

use crate::model::filter::SortKey;

/// One column of the process table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Column {
    /// The pid, with the tag mark before it.
    Pid,
    User,
    /// The nice value.
    Nice,
    /// R, S, D, T (stopped), Z, ... from /proc.
    State,
    Gpu,
    /// C, G or C+G: nearly always C, so the first to go.
    Kind,
    GpuMemory,
    /// GPU-MEM as a share of the device's memory.
    GpuMemoryPercent,
    Sm,
    /// Memory-bandwidth, encoder and decoder shares (nvitop's %GMBW, %ENC, %DEC).
    MemoryBandwidth,
    Encoder,
    Decoder,
    Cpu,
    /// RSS as a share of the host's memory.
    HostMemoryPercent,
    Rss,
    Time,
    /// The wall-clock time the process started.
    Start,
    /// rank/world of a torch process.
    Rank,
    /// The container, pod, Slurm job or cgroup of a GPU process (`GpuProcess::placement_label`).
    Container,
    /// The command line; takes the room the others leave.
    Command,
}

/// The fixed columns in display order (COMMAND, last, is not listed: it always shows).
pub(crate) const ORDER: [Column; 19] = [
    Column::Pid,
    Column::User,
    Column::Nice,
    Column::State,
    Column::Gpu,
    Column::Kind,
    Column::GpuMemory,
    Column::GpuMemoryPercent,
    Column::Sm,
    Column::MemoryBandwidth,
    Column::Encoder,
    Column::Decoder,
    Column::Cpu,
    Column::HostMemoryPercent,
    Column::Rss,
    Column::Time,
    Column::Start,
    Column::Container,
    Column::Rank,
];

/// The fixed columns from the one kept longest to the one dropped first on a narrow terminal.
const KEEP_ORDER: [Column; 19] = [
    Column::Pid,
    Column::Gpu,
    Column::GpuMemory,
    Column::Sm,
    Column::Cpu,
    Column::Rank,
    Column::User,
    Column::State,
    Column::Rss,
    Column::Time,
    Column::GpuMemoryPercent,
    Column::HostMemoryPercent,
    Column::Nice,
    Column::Start,
    Column::MemoryBandwidth,
    Column::Container,
    Column::Encoder,
    Column::Decoder,
    Column::Kind,
];

/// COMMAND gets at least this many cells, or a quarter of the width when that is more (half in
/// the tree, whose guides take room too), before a lower-priority column is shown.
const MIN_COMMAND_WIDTH: u16 = 19;
/// Cells between two columns.
pub(crate) const SPACING: u16 = 1;

impl Column {
    pub(crate) fn title(self) -> &'static str {
        match self {
            Column::Pid => "PID",
            Column::User => "USER",
            Column::Nice => "NI",
            Column::State => "S",
            Column::Gpu => "GPU",
            Column::Kind => "TYPE",
            Column::GpuMemory => "GPU-MEM",
            Column::GpuMemoryPercent => "GMEM%",
            Column::Sm => "SM%",
            Column::MemoryBandwidth => "GMBW%",
            Column::Encoder => "ENC%",
            Column::Decoder => "DEC%",
            Column::Cpu => "CPU%",
            Column::HostMemoryPercent => "MEM%",
            Column::Rss => "RSS",
            Column::Time => "TIME",
            Column::Start => "START",
            Column::Rank => "RANK",
            Column::Container => "CONTAINER",
            Column::Command => "COMMAND",
        }
    }

    /// Cells, with room for the sort arrow after the title of a sortable column.
    fn width(self) -> u16 {
        match self {
            Column::Pid | Column::User | Column::GpuMemory | Column::Time => 8,
            Column::Gpu | Column::Kind | Column::Sm => 4,
            // Room for N/A.
            Column::Nice | Column::State => 3,
            Column::Cpu | Column::GpuMemoryPercent | Column::Start | Column::MemoryBandwidth => 6,
            Column::Rss => 7,
            Column::Rank | Column::HostMemoryPercent | Column::Encoder | Column::Decoder => 5,
            Column::Container => 18,
            Column::Command => 0,
        }
    }

    /// The order a click on the title (or the sort menu) chooses; `None` for unsortable ones.
    pub(crate) fn sort_key(self) -> Option<SortKey> {
        Some(match self {
            Column::Pid => SortKey::Pid,
            Column::User => SortKey::User,
            Column::Gpu => SortKey::Gpu,
            Column::Nice => SortKey::Nice,
            // A share orders the rows as its figure does (on GPUs of one size), and the start
            // time as the running time (oldest first when descending).
            Column::GpuMemory | Column::GpuMemoryPercent => SortKey::GpuMemory,
            Column::Sm => SortKey::Sm,
            Column::Cpu => SortKey::Cpu,
            Column::Rss | Column::HostMemoryPercent => SortKey::Rss,
            Column::Time | Column::Start => SortKey::Time,
            Column::Command => SortKey::Command,
            Column::Kind
            | Column::Rank
            | Column::State
            | Column::Container
            | Column::MemoryBandwidth
            | Column::Encoder
            | Column::Decoder => return None,
        })
    }

    /// A share or a start time sorts by the figure it derives from; the arrow goes on that
    /// figure's column, not on both.
    pub(crate) fn shows_sort_arrow(self) -> bool {
        !matches!(
            self,
            Column::GpuMemoryPercent | Column::HostMemoryPercent | Column::Start
        )
    }

    /// Figures are right-aligned, text left-aligned.
    pub(crate) fn right_aligned(self) -> bool {
        !matches!(
            self,
            Column::User | Column::Kind | Column::State | Column::Container | Column::Command
        )
    }
}

/// One column placed on the screen, relative to the table's left edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placed {
    pub(crate) column: Column,
    pub(crate) x: u16,
    pub(crate) width: u16,
}

/// The columns that fit a table `width` cells wide, but for those the user hid in the setup
/// screen (F2); RANK only `with_rank` (some row is a torch process). COMMAND is last and takes
/// the rest.
pub(crate) fn fit_shown(width: u16, with_rank: bool, tree: bool, hidden: &[Column]) -> Vec<Placed> {
    let mut placed = Vec::new();
    fit_shown_into(width, with_rank, tree, |c| hidden.contains(&c), &mut placed);
    placed
}

/// [`fit_shown`] into `placed` (emptied first), with `hidden` saying which columns the user
/// hid: what a frame asks, without a vector of its own.
pub(crate) fn fit_shown_into(
    width: u16,
    with_rank: bool,
    tree: bool,
    hidden: impl Fn(Column) -> bool,
    placed: &mut Vec<Placed>,
) {
    placed.clear();
    let share = if tree { width / 2 } else { width / 4 };
    let mut used = MIN_COMMAND_WIDTH.max(share);
    for column in KEEP_ORDER {
        if (column == Column::Rank && !with_rank) || hidden(column) {
            continue;
        }
        let cost = column.width() + SPACING;
        // Strictly by priority: a small column never shows while a more needed one is hidden.
        if used + cost > width && placed.len() >= 3 {
            break;
        }
        used += cost;
        placed.push(Placed {
            column,
            x: 0,
            width: column.width(),
        });
    }
    // The chosen columns in display order, then placed left to right.
    placed.sort_unstable_by_key(|p| ORDER.iter().position(|c| *c == p.column));
    let mut x = 0u16;
    for p in placed.iter_mut() {
        p.x = x;
        x = x.saturating_add(p.width + SPACING);
    }
    placed.push(Placed {
        column: Column::Command,
        x,
        width: width.saturating_sub(x),
    });
}

/// The column drawn at `x` cells from the table's left edge, if any (not the gaps between).
pub(crate) fn column_at(placed: &[Placed], x: u16) -> Option<Column> {
    placed
        .iter()
        .find(|p| x >= p.x && (x < p.x + p.width || p.column == Column::Command))
        .map(|p| p.column)
}

/// The width of COMMAND among `placed`.
pub(crate) fn command_width(placed: &[Placed]) -> u16 {
    placed
        .iter()
        .find(|p| p.column == Column::Command)
        .map_or(0, |p| p.width)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The columns a new user sees (the GPU shares and the container are hidden by default).
    fn fit(width: u16, with_rank: bool, tree: bool) -> Vec<Placed> {
        let hidden = [
            Column::MemoryBandwidth,
            Column::Encoder,
            Column::Decoder,
            Column::Container,
        ];
        fit_shown(width, with_rank, tree, &hidden)
    }

    #[test]
    fn every_column_can_be_shown() {
        let all = fit_shown(300, true, false, &[]);
        assert_eq!(titles(&all).len(), ORDER.len() + 1, "{:?}", titles(&all));
        assert!(titles(&all).contains(&"GMBW%"));
    }

    fn titles(placed: &[Placed]) -> Vec<&'static str> {
        placed.iter().map(|p| p.column.title()).collect()
    }

    #[test]
    fn narrow_terminals_drop_the_least_needed_columns_first() {
        let wide = fit(200, true, false);
        assert_eq!(
            titles(&wide),
            [
                "PID", "USER", "NI", "S", "GPU", "TYPE", "GPU-MEM", "GMEM%", "SM%", "CPU%", "MEM%",
                "RSS", "TIME", "START", "RANK", "COMMAND"
            ]
        );
        let narrow = fit(80, true, false);
        assert!(!titles(&narrow).contains(&"TYPE"));
        assert!(titles(&narrow).contains(&"RANK"));
        assert!(command_width(&narrow) >= MIN_COMMAND_WIDTH);
        assert!(!titles(&fit(200, false, false)).contains(&"RANK"));
        let tree = fit(120, false, true);
        assert!(command_width(&tree) >= 60, "the tree's guides need room");
        let tiny = fit(30, true, false);
        assert_eq!(titles(&tiny), ["PID", "GPU", "GPU-MEM", "COMMAND"]);
    }

    #[test]
    fn columns_are_placed_one_cell_apart_and_found_by_x() {
        let placed = fit(120, false, false);
        for pair in placed.windows(2) {
            assert_eq!(pair[1].x, pair[0].x + pair[0].width + SPACING);
        }
        assert_eq!(column_at(&placed, 0), Some(Column::Pid));
        assert_eq!(column_at(&placed, 8), None, "the gap after PID");
        assert_eq!(column_at(&placed, 9), Some(Column::User));
        assert_eq!(column_at(&placed, 119), Some(Column::Command));
    }
}
