//! Render tests of the PyTorch panel: a process on two GPUs with each torch device mapped to its
//! physical GPU, the OOM headroom figures, the all-ranks table of a job, auto-scaled sparklines,
//! a process with an agent and no GPU, a panel that keeps its size among rows with an agent
//! and folds to one line on a row without, and the question `P` asks before it resets an
//! agent's peaks.

use super::*;
use crate::app::layout::Plan;
use crate::model::{Job, JobRank, LaunchEnv};

/// A job of three ranks; rank 0 (pid 30000) drives GPUs 2 and 3 (`CUDA_VISIBLE_DEVICES=2,3`),
/// rank 2 is slow; pid 40000 on GPU 0 has no agent. Allocated memory grows 8 → 8.6 GiB.
fn job_snapshot(t: u32) -> Snapshot {
    let gpus: Vec<GpuSample> = (0..4).map(|i| gpu(i, t)).collect();
    let device = |index: u32, gpu_index: u32, t: u32| {
        let allocated = 8 * GIB + u64::from(t) * (GIB * 6 / 10) / u64::from(HISTORY_SAMPLES);
        let used = gpus[gpu_index as usize].memory_used_bytes.unwrap();
        DeviceAllocatorStats {
            index,
            gpu: Some(gpu_index),
            allocated_bytes: Some(allocated),
            reserved_bytes: Some(10 * GIB),
            peak_allocated_bytes: Some(9 * GIB),
            peak_reserved_bytes: Some(11 * GIB),
            large_pool_reserved_bytes: Some(9 * GIB + GIB / 2),
            small_pool_reserved_bytes: Some(GIB / 2),
            oversize_allocations: Some(1),
            oversize_segments: Some(1),
            allocations_per_second: Some(1520.0),
            frees_per_second: Some(1490.0),
            alloc_retries: Some(if gpu_index == 1 { 7 } else { 0 }),
            ooms: Some(0),
            non_pytorch_bytes: Some(GIB / 2),
            device_total_bytes: Some(80 * GIB),
            headroom_bytes: Some(80 * GIB - used),
            ..Default::default()
        }
    };
    let torch = |rank: u32, devices: Vec<DeviceAllocatorStats>| TorchInfo {
        torch: Some("2.11.0".to_string()),
        rank: Some(rank),
        world_size: Some(3),
        step: Some(500 + u64::from(t)),
        step_time_seconds: Some(if rank == 2 { 0.81 } else { 0.5 }),
        alloc_conf: Some("expandable_segments:True".to_string()),
        devices,
        age_seconds: Some(0.3),
        ..Default::default()
    };
    let mut rows = Vec::new();
    for gpu_index in [2, 3] {
        let mut p = process(0, gpu_index);
        p.pid = 30_000;
        p.gpu_memory_bytes = Some(if gpu_index == 2 { 12 * GIB } else { 11 * GIB });
        p.env = Some(
            LaunchEnv {
                cuda_visible_devices: Some("2,3".to_string()),
                ..Default::default()
            }
            .into(),
        );
        p.torch = Some(std::sync::Arc::new(torch(
            0,
            vec![device(0, 2, t), device(1, 3, t)],
        )));
        rows.push(p);
    }
    for (rank, gpu_index) in [(1, 0), (2, 1)] {
        let mut p = process(rank, gpu_index);
        p.pid = 30_000 + rank;
        p.torch = Some(std::sync::Arc::new(torch(
            rank,
            vec![device(0, gpu_index, t)],
        )));
        rows.push(p);
    }
    let mut plain = process(3, 0);
    plain.pid = 40_000;
    plain.gpu_memory_bytes = Some(GIB);
    rows.push(plain);
    let mut snapshot = snapshot_with(gpus, rows);
    let rank = |pid: u32, gpu: u32, rank: u32| JobRank {
        pid,
        gpu,
        rank: Some(rank),
        local_rank: Some(rank),
        world_size: Some(3),
    };
    snapshot.jobs = vec![Job {
        gone: Vec::new(),
        id: "job 127.0.0.1:29500".to_string(),
        ranks: vec![
            rank(30_000, 2, 0),
            rank(30_000, 3, 0),
            rank(30_001, 0, 1),
            rank(30_002, 1, 2),
        ],
    }];
    snapshot
}

fn job_app() -> App {
    app_after(job_snapshot)
}

#[test]
fn a_two_gpu_rank_maps_both_devices_and_shows_headroom_and_the_ranks_table() {
    let app = job_app();
    for (width, height, name) in [
        (80, 24, "torch_job_80x24"),
        (120, 40, "torch_job_120x40"),
        (200, 50, "torch_job_200x50"),
    ] {
        let s = screen(&app, width, height);
        insta::assert_snapshot!(name, s);
        assert!(s.contains("PYTORCH pid 30000  rank 0/3"), "{s}");
        let first = line_with(&s, "cuda:0 = GPU 2");
        assert!(first.contains("total 80.0GiB"), "{first}");
        // GPU 2 uses 48 GiB and a little: 32 GiB of 80 is left, 40%.
        assert!(
            first.contains("headroom 31.") && first.contains("(40%)"),
            "{first}"
        );
        assert!(first.contains("cached 1."), "{first}");
        assert!(s.contains("cuda:1 = GPU 3"), "{s}");
        assert!(!s.contains("non-PyTorch N/A"), "{s}");
        if height >= 40 {
            // At 80x24 the history and the OOM lines take the rows the table would need.
            assert!(s.contains("3 ranks of job 127.0.0.1:29500"), "{s}");
            let slow = line_with(&s, "0.810s");
            assert!(
                slow.contains("!   2   1"),
                "the slow rank is marked: {slow}"
            );
        }
    }
    let large = screen(&app, 200, 50);
    for figure in [
        "peak-reserved 11.0GiB",
        "large-pool 9.5GiB",
        "small-pool 512.0MiB",
        "oversize 1 in 1 segments",
        "allocs 1.5k/s",
        "frees 1.5k/s",
        "alloc-conf expandable_segments:True",
    ] {
        assert!(large.contains(figure), "{figure} missing:\n{large}");
    }
}

#[test]
fn allocator_sparklines_span_their_window_with_min_and_max_beside() {
    let app = job_app();
    let s = screen(&app, 200, 50);
    let line = s
        .lines()
        .find(|l| l.contains(" allocated ") && l.contains('▁'))
        .unwrap_or_else(|| panic!("no allocated sparkline in\n{s}"));
    let line = line.split(" reserved").next().unwrap_or(line);
    assert!(line.contains("8.0G") && line.contains("8.6G"), "{line}");
    // 8 → 8.6 GiB rises from the lowest bar to the highest.
    assert!(line.contains('▁') && line.contains('█'), "{line}");
}

#[test]
fn the_pytorch_panel_keeps_its_size_among_agent_rows_and_is_one_line_on_a_plain_row() {
    use crossterm::event::KeyCode;
    for (width, height) in [(80, 24), (120, 40), (200, 50)] {
        let mut app = sized(job_app(), width, height);
        let plan =
            |app: &App| crate::ui::plan(app, ratatui::layout::Rect::new(0, 0, width, height));
        let first = plan(&app);
        let Plan::Screen(areas) = &first else {
            panic!("too small");
        };
        // At 80x24 the PyTorch panel of the selected rank comes before the history.
        assert_eq!(areas.history.is_some(), height >= 40, "{width}x{height}");
        assert!(
            areas.allocator.is_some_and(|a| a.height > 1),
            "PyTorch panel at {width}x{height}"
        );
        let mut saw_plain = false;
        for _ in 0..app.row_count() {
            key(&mut app, KeyCode::Down);
            let now = plan(&app);
            let selected = crate::ui::processes::selected_process(&app).unwrap();
            if selected.torch.is_some() {
                assert_eq!(now, first, "the layout moved at {width}x{height}");
                continue;
            }
            saw_plain = true;
            let Plan::Screen(areas) = &now else {
                panic!("too small");
            };
            assert_eq!(areas.allocator.map(|a| a.height), Some(1), "{areas:?}");
            // The table gets the rows the panel had below it, or its columns beside it.
            if width < crate::app::layout::WIDE_WIDTH {
                assert!(
                    now.process_rows() > first.process_rows(),
                    "{width}x{height}"
                );
            } else {
                assert_eq!(areas.processes.width, width, "{width}x{height}");
            }
            let s = screen(&app, width, height);
            assert!(
                line_with(&s, "PYTORCH pid 40000").contains("no torchtop agent in this process"),
                "{s}"
            );
            // The keys' review: under a monitor not root's, another user's process may have
            // an agent that speaks only to root's; `torchtop run` is no advice there.
            let saved = app.effective_uid;
            app.effective_uid = 4242;
            let s = screen(&app, width, height);
            app.effective_uid = saved;
            assert!(
                line_with(&s, "PYTORCH pid 40000").contains("another user's process"),
                "{s}"
            );
        }
        assert!(saw_plain, "the row without an agent was visited");
    }
}

/// Tried as a user: a rank that had exited, its memory still listed by the driver, was told to
/// start an agent with `torchtop run`.
#[test]
fn the_panel_of_a_process_not_in_proc_does_not_offer_an_agent() {
    let mut snapshot = busy_snapshot(1, 1, 0);
    snapshot.processes[0].torch = Some(Arc::new(TorchInfo::default()));
    let mut gone = snapshot.processes[0].clone();
    (gone.pid, gone.torch, gone.visible) = (7, None, false);
    snapshot.processes.push(gone);
    let mut app = App::new(1.0, true, false);
    app.on_snapshot(Arc::new(snapshot));
    while crate::ui::processes::selected_process(&app).is_some_and(|p| p.pid != 7) {
        key(&mut app, crossterm::event::KeyCode::Down);
    }
    let s = screen(&app, 120, 40);
    let line = line_with(&s, "PYTORCH pid 7");
    assert!(
        line.contains("not in this machine's /proc (it has exited, or runs in another container)"),
        "{s}"
    );
}

/// A process stopped before the monitor started: its agent never said hello. The panel said
/// "no torchtop agent in this process: start it with `torchtop run`".
#[test]
fn the_panel_of_a_process_whose_agent_is_silent_says_so_and_why() {
    let mut snapshot = busy_snapshot(1, 1, 0);
    for p in &mut snapshot.processes {
        p.torch = None;
        p.state = Some('T');
        p.agent_silent_seconds = Some(75.0);
    }
    let pid = snapshot.processes[0].pid;
    let mut app = App::new(1.0, true, false);
    app.on_snapshot(Arc::new(snapshot));
    let s = screen(&app, 120, 40);
    assert!(
        line_with(&s, &format!("PYTORCH pid {pid}")).contains(
            "its agent has said nothing for 75 s since torchtop connected: the process is \
             stopped (state T)"
        ),
        "{s}"
    );
}

#[test]
fn a_process_with_an_agent_and_no_gpu_is_listed_with_its_torch_section() {
    let mut snapshot = busy_snapshot(1, 1, 0);
    let mut cpu = crate::model::GpuProcess::agent_only(
        50_000,
        TorchInfo {
            torch: Some("2.11.0".to_string()),
            rank: Some(0),
            world_size: Some(2),
            ..Default::default()
        }
        .into(),
    );
    cpu.visible = true;
    cpu.user = Some("erin".to_string().into());
    cpu.command = Some("python3 train_cpu.py".to_string().into());
    cpu.cpu_percent = Some(390.0);
    snapshot.processes.push(cpu);
    let mut app = sized(app_with(snapshot), 120, 40);
    let s = screen(&app, 120, 40);
    let row = line_with(&s, "50000 erin");
    assert!(row.contains("train_cpu.py"), "{row}");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[4..6],
        ["-", "-"],
        "GPU and GPU-MEM say '-', no GPU memory: {row}"
    );
    key(&mut app, crossterm::event::KeyCode::Down);
    let s = screen(&app, 120, 40);
    assert!(s.contains("PYTORCH pid 50000  rank 0/2"), "{s}");
    assert!(s.contains("no GPU memory: no CUDA device in use"), "{s}");
}

#[test]
fn p_asks_before_it_resets_the_peaks_and_names_the_rank() {
    use crossterm::event::KeyCode;
    let mut app = sized(job_app(), 100, 30);
    while app.selected_row().is_some_and(|r| r.pid != 30_001) {
        key(&mut app, KeyCode::Down);
    }
    key(&mut app, KeyCode::Char('P'));
    assert!(
        matches!(app.mode, Mode::ConfirmPeakReset { .. }),
        "{:?}",
        app.mode
    );
    let s = screen(&app, 100, 30);
    assert!(
        s.contains("Reset the peak memory figures of this process?"),
        "{s}"
    );
    assert!(
        s.contains("peak allocated and reserved bytes start again"),
        "{s}"
    );
    assert!(
        s.contains("The program's own torch.cuda.max_memory_allocated() resets too."),
        "{s}"
    );
    assert!(s.contains(" 30001  "), "{s}");
    assert!(s.contains("rank 1/3 of job 127.0.0.1:29500"), "{s}");
    assert!(s.contains("y or Enter: reset   n or Esc: cancel"), "{s}");
    for (width, height) in [(1, 1), (10, 3), (30, 8), (59, 15), (60, 16), (80, 24)] {
        render(&app, width, height);
    }
}

/// A review: the panel printed `allocated 108.0MiB` above a sparkline labelled `104M … 104M`,
/// the min and max of bucket averages. The labels are the window's samples' own min and max,
/// and the spike's bucket draws at full height.
#[test]
fn the_sparklines_labels_are_the_samples_min_and_max_and_a_spike_shows() {
    const MIB: u64 = 1024 * 1024;
    let app = app_after(|t| {
        let mut snapshot = busy_snapshot(1, 1, t);
        let mut torch = torch_info(0, t);
        let spike = t + 1 == HISTORY_SAMPLES;
        torch.devices[0].allocated_bytes = Some(if spike { 108 * MIB } else { 104 * MIB });
        snapshot.processes[0].torch = Some(Arc::new(torch));
        snapshot
    });
    let s = screen(&app, 120, 40);
    assert!(s.contains("allocated 108.0MiB"), "{s}");
    let line = line_with(&s, " allocated  ");
    let figures: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(figures[1], "104M", "the min: {line}\n{s}");
    let spark = figures[2];
    assert_eq!(figures[3], "108M", "the max: {line}\n{s}");
    assert!(
        spark.ends_with('█'),
        "the newest bucket holds the spike: {line}"
    );
}

/// Tried as a user: rank 2 of a job killed; the JOB line and the ranks table now say so
/// instead of leaving it out, and a job down to one rank keeps its line.
#[test]
fn a_rank_that_left_is_named_on_the_job_line_and_in_the_ranks_table() {
    let left = |live: &[u32]| {
        let live = live.to_vec();
        app_after(move |t| {
            let mut snapshot = job_snapshot(t);
            let job = &mut snapshot.jobs[0];
            job.ranks.retain(|r| live.contains(&r.pid));
            job.gone = vec![crate::model::GoneRank {
                pid: 30_002,
                gpu: 1,
                rank: Some(2),
                gone_seconds: 34.0,
            }];
            snapshot
        })
    };
    let s = screen(&left(&[30_000, 30_001]), 120, 40);
    let line = line_with(&s, "JOB job 127.0.0.1:29500");
    assert!(
        line.contains(" r1") && line.contains(" r2 gone 34 s"),
        "{line}"
    );
    assert!(
        s.contains("2 ranks of job 127.0.0.1:29500; rank 2 gone 34 s ago"),
        "{s}"
    );
    let s = screen(&left(&[30_000]), 120, 40);
    assert!(
        line_with(&s, "JOB job 127.0.0.1:29500").contains(" r2 gone 34 s"),
        "{s}"
    );
    assert!(
        s.contains("1 rank of job 127.0.0.1:29500; rank 2 gone 34 s ago"),
        "{s}"
    );
}
