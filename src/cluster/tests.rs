//! Render tests of the cluster view: hand-built Prometheus answers drawn on ratatui's
//! TestBackend at 80x24 and 120x40, with insta snapshots of the text, and the plain text of
//! `--once`.

use std::collections::BTreeMap;
use std::time::Duration;

use ratatui::{backend::TestBackend, Terminal};

use super::fetch::{Fetched, NODE_DOWN, RANK_LOST};
use super::promql::{Range, Sample};
use super::render;
use super::state::ClusterApp;
use super::tests_support::buffer_text;

fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
    let mut map: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    map.insert("__name__".into(), name.into());
    Sample { labels: map, value }
}

fn gpus(host: &str, count: u32) -> Vec<Sample> {
    let mut out = Vec::new();
    for gpu in 0..count {
        let index = gpu.to_string();
        let l = [
            ("Hostname", host),
            ("gpu", index.as_str()),
            ("modelName", "NVIDIA H100 80GB HBM3"),
        ];
        let g = f64::from(gpu);
        out.push(sample("DCGM_FI_DEV_GPU_UTIL", &l, 60.0 + g * 5.0));
        out.push(sample("DCGM_FI_DEV_FB_USED", &l, 40000.0 + g * 1000.0));
        out.push(sample("DCGM_FI_DEV_FB_FREE", &l, 41000.0 - g * 1000.0));
        out.push(sample("DCGM_FI_DEV_GPU_TEMP", &l, 55.0 + g));
        out.push(sample("DCGM_FI_DEV_POWER_USAGE", &l, 400.0 + g * 10.0));
        let mut state = l.to_vec();
        state.push((
            "state",
            if host == "node-b" && gpu == 1 {
                "stale"
            } else {
                "ok"
            },
        ));
        out.push(sample("torchtop_gpu_state", &state, 1.0));
    }
    out
}

fn ranks() -> Vec<Sample> {
    let mut out = Vec::new();
    for (rank, host, pid, gpu, step) in [
        (0, "node-a", "4100", "0", 0.412),
        (1, "node-a", "4101", "1", 0.409),
        (2, "node-b", "5200", "0", 0.415),
        (3, "node-b", "5201", "1", 0.731),
    ] {
        let rank = rank.to_string();
        let l = [
            ("Hostname", host),
            ("pid", pid),
            ("rank", rank.as_str()),
            ("training_job", "torchelastic run llama-7b"),
        ];
        let mut with_gpu = l.to_vec();
        with_gpu.push(("gpu", gpu));
        out.push(sample(
            "torchtop_process_gpu_memory_bytes",
            &with_gpu,
            38.5e9,
        ));
        out.push(sample("torchtop_step_time_seconds", &l, step));
    }
    out
}

fn warnings() -> Vec<Sample> {
    vec![
        sample(
            "torchtop_warning",
            &[
                ("Hostname", "node-b"),
                ("id", "throttle"),
                ("severity", "warn"),
                ("subject", "gpu 1"),
            ],
            1.0,
        ),
        sample(
            "torchtop_warning",
            &[
                ("Hostname", "node-a"),
                ("id", "oom-risk"),
                ("severity", "critical"),
                ("subject", "pid 4101"),
            ],
            1.0,
        ),
    ]
}

fn history() -> Vec<Range> {
    ["node-a", "node-b"]
        .iter()
        .enumerate()
        .map(|(n, host)| Range {
            labels: [("Hostname".to_string(), host.to_string())]
                .into_iter()
                .collect(),
            points: (0..30)
                .map(|i| (f64::from(i), f64::from((i * 7 + n as i32 * 30) % 100)))
                .collect(),
        })
        .collect()
}

fn fetched() -> Fetched {
    let mut nodes = gpus("node-a", 2);
    nodes.extend(gpus("node-b", 2));
    Fetched {
        nodes: Ok(nodes),
        jobs: Ok(ranks()),
        warnings: Ok(warnings()),
        history: Ok(history()),
        took: Duration::from_millis(12),
    }
}

fn app() -> ClusterApp {
    let mut app = ClusterApp::new("http://prometheus:9090".into(), 20.0, true);
    app.on_fetch(fetched(), "12:00:01 UTC".into());
    app
}

fn screen(app: &ClusterApp, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| render::draw(frame, app)).unwrap();
    buffer_text(terminal.backend().buffer())
}

#[test]
fn two_nodes_and_a_job_with_its_straggler() {
    let mut app = app();
    app.on_key(crossterm::event::KeyEvent::from(
        crossterm::event::KeyCode::Enter,
    ));
    let small = screen(&app, 80, 24);
    let large = screen(&app, 120, 40);
    for text in [&small, &large] {
        assert!(text.contains("node-a") && text.contains("node-b"), "{text}");
        assert!(text.contains("STRAGGLER"), "{text}");
        assert!(text.contains("GPU  1"), "node-a expanded: {text}");
    }
    insta::assert_snapshot!("cluster_80x24", small);
    insta::assert_snapshot!("cluster_120x40", large);
}

#[test]
fn a_failed_refresh_keeps_the_data_and_says_why() {
    let mut app = app();
    let mut failed = fetched();
    failed.nodes = Err("cannot reach Prometheus at http://prometheus:9090: Connection refused; check the URL and that it runs".into());
    failed.jobs = Err(
        "Prometheus at http://prometheus:9090 did not answer within 5 s; it may be overloaded"
            .into(),
    );
    app.on_fetch(failed, "12:00:06 UTC".into());
    let small = screen(&app, 80, 24);
    let large = screen(&app, 120, 40);
    for text in [&small, &large] {
        assert!(text.contains("STALE"), "{text}");
        assert!(text.contains("node-b"), "the last data stays: {text}");
        assert!(
            text.contains("the nodes could not be read: cannot reach Prometheus"),
            "{text}"
        );
    }
    insta::assert_snapshot!("cluster_stale_80x24", small);
    insta::assert_snapshot!("cluster_stale_120x40", large);
}

/// The answers of [`fetched`] after node-c, which ran ranks 4 and 5 of the job, stopped
/// answering Prometheus' scrapes 42 s ago.
fn fetched_with_node_c_down() -> Fetched {
    let mut fetched = fetched();
    let down = sample(
        NODE_DOWN,
        &[
            ("Hostname", "node-c"),
            ("instance", "10.0.0.3:9400"),
            ("job", "torchtop"),
        ],
        42.0,
    );
    fetched.nodes.as_mut().unwrap().push(down);
    for (rank, pid) in [("4", "6300"), ("5", "6301")] {
        let labels = [
            ("Hostname", "node-c"),
            ("pid", pid),
            ("rank", rank),
            ("training_job", "torchelastic run llama-7b"),
        ];
        fetched
            .jobs
            .as_mut()
            .unwrap()
            .push(sample(RANK_LOST, &labels, 1.0));
    }
    fetched
}

#[test]
fn a_node_that_stopped_reporting_is_down_and_its_job_says_what_is_missing() {
    let mut app = ClusterApp::new("http://prometheus:9090".into(), 20.0, true);
    app.on_fetch(fetched_with_node_c_down(), "12:00:01 UTC".into());
    let large = screen(&app, 120, 40);
    assert!(large.contains("3 nodes, 1 down  4 GPUs"), "{large}");
    let down = large.lines().find(|l| l.contains("node-c")).unwrap();
    assert!(
        down.contains(
            "DOWN  last seen 42 s ago; Prometheus cannot scrape its exporter at 10.0.0.3:9400"
        ),
        "{large}"
    );
    assert!(large.contains("4 ranks on 2 nodes, 2 missing"), "{large}");
    let warning = large.lines().find(|l| l.contains("node-down"));
    assert!(
        warning.is_some_and(|l| l.starts_with("  CRIT node-c") && l.contains("last seen 42 s ago")),
        "the WARNINGS list says node-c is down: {large}"
    );
    assert_eq!(
        large.matches("NOT REPORTING: its node is down").count(),
        2,
        "{large}"
    );
    insta::assert_snapshot!("cluster_down_120x40", large);
}

/// A review: node-c's `torchtop serve` died while dcgm-exporter on node-c went on: the row kept
/// dcgm's figures with WARN 0, and nothing said that torchtop no longer watched the node.
#[test]
fn a_node_whose_torchtop_is_down_while_dcgm_reports_it_says_so_and_warns() {
    let mut fetched = fetched();
    let dcgm_only = gpus("node-c", 2)
        .into_iter()
        .filter(|s| s.labels["__name__"] != "torchtop_gpu_state");
    let nodes = fetched.nodes.as_mut().unwrap();
    nodes.extend(dcgm_only);
    let down = [
        ("Hostname", "node-c"),
        ("instance", "10.0.0.3:9400"),
        ("job", "torchtop"),
    ];
    nodes.push(sample(NODE_DOWN, &down, 7.0));
    let mut app = ClusterApp::new("http://prometheus:9090".into(), 20.0, true);
    app.on_fetch(fetched, "12:00:01 UTC".into());
    for (width, height) in [(120, 40), (80, 24)] {
        let text = screen(&app, width, height);
        let row = text.lines().find(|l| l.contains("node-c")).unwrap_or("");
        assert!(row.contains("   2 "), "dcgm's GPUs stay: {text}");
        assert!(row.ends_with("torchtop DOWN"), "{text}");
        assert!(text.contains("3 nodes  6 GPUs"), "not a node down: {text}");
    }
    let text = render::once_text(&app);
    let warning = text.lines().find(|l| l.contains("exporter-down"));
    assert!(
        warning.is_some_and(|l| l.starts_with("  CRIT node-c")
            && l.contains("torchtop's exporter on node-c is down: last seen 7 s ago")),
        "{text}"
    );
    let doc = serde_json::to_value(&app.view).unwrap();
    let c = &doc["nodes"][2];
    assert_eq!(
        (
            &c["hostname"],
            &c["down"],
            &c["exporter_down"],
            &c["warnings"]
        ),
        (&"node-c".into(), &false.into(), &true.into(), &1.into()),
        "{doc:#}"
    );
    let critical = Some(crate::model::Severity::Critical);
    assert_eq!(super::warnings::once_status(&app, critical), 4);
}

#[test]
fn once_text_is_plain_and_sized_to_its_content() {
    let mut app = ClusterApp::new("http://prometheus:9090".into(), 20.0, true);
    app.on_fetch(fetched_with_node_c_down(), "12:00:01 UTC".into());
    let text = render::once_text(&app);
    // Header; nodes: 2 + 3 nodes; jobs: 2 + title + 4 ranks + 2 missing; warnings: 2 + 2
    // exported + node-c's node-down + the note on the exported ones' messages.
    assert_eq!(text.lines().count(), 1 + 5 + 9 + 6, "{text}");
    assert!(
        text.lines().all(|l| !l.is_empty() && l == l.trim_end()),
        "{text}"
    );
    assert!(!text.contains("q quit") && !text.contains('▸'), "{text}");
    assert!(text.contains("node-c") && text.contains("DOWN"), "{text}");
}

#[test]
fn once_text_says_which_panels_could_not_be_read() {
    let mut app = ClusterApp::new("http://prometheus:9090".into(), 20.0, true);
    let refused = "cannot reach Prometheus at http://prometheus:9090: Connection refused; check \
                   the URL and that it runs";
    app.on_fetch(
        Fetched {
            nodes: Err(refused.into()),
            jobs: Err(refused.into()),
            warnings: Err(refused.into()),
            history: Err(refused.into()),
            took: Duration::from_millis(1),
        },
        "12:00:01 UTC".into(),
    );
    let text = render::once_text(&app);
    assert_eq!(
        text.matches(&format!("could not be read: {refused}"))
            .count(),
        3,
        "{text}"
    );
    assert!(
        !text.contains("no job") && !text.contains("  none"),
        "{text}"
    );
    assert!(!text.contains("stale") && !text.contains("STALE"), "{text}");
    assert!(
        text.contains("? nodes  ? GPUs  ? jobs  ? warnings"),
        "{text}"
    );
    assert!(!text.contains("q quit"), "{text}");
}

/// Node a's name is a long FQDN, and its warning's id and subject are longer than the TUI's
/// columns, as `cpu-oversubscription` on a job is.
fn fetched_with_long_names() -> Fetched {
    let host = "gpu-node-017.rack-07.cluster.example.internal";
    let mut fetched = fetched();
    let rename = |samples: &mut Vec<Sample>| {
        for sample in samples {
            if sample.labels.get("Hostname").map(String::as_str) == Some("node-a") {
                sample.labels.insert("Hostname".into(), host.into());
            }
        }
    };
    rename(fetched.nodes.as_mut().unwrap());
    rename(fetched.jobs.as_mut().unwrap());
    fetched.warnings.as_mut().unwrap().push(sample(
        "torchtop_warning",
        &[
            ("Hostname", host),
            ("id", "cpu-oversubscription"),
            ("severity", "warn"),
            ("subject", "torchelastic run llama-7b-finetune"),
        ],
        1.0,
    ));
    fetched
}

#[test]
fn once_text_columns_are_as_wide_as_their_longest_value() {
    let host = "gpu-node-017.rack-07.cluster.example.internal";
    let mut app = ClusterApp::new("http://prometheus:9090".into(), 20.0, true);
    app.on_fetch(fetched_with_long_names(), "12:00:01 UTC".into());
    let text = render::once_text(&app);
    assert!(!text.contains('…'), "nothing is cut:\n{text}");
    let row = text
        .lines()
        .find(|l| l.contains("cpu-oversubscription"))
        .unwrap_or_else(|| panic!("the whole id:\n{text}"));
    assert!(
        row.contains(&format!(
            "WARN {host} cpu-oversubscription torchelastic run llama-7b-finetune N/A"
        )),
        "{text}"
    );
    // Every row of a section starts its columns where its heading does.
    let column = |line: &str, word: &str| line.find(word).unwrap();
    let heading = text.lines().find(|l| l.contains("SEV  NODE")).unwrap();
    let throttle = text.lines().find(|l| l.contains("throttle")).unwrap();
    assert_eq!(column(heading, "WARNING"), column(row, "cpu-"), "{text}");
    assert_eq!(
        column(heading, "WARNING"),
        column(throttle, "throttle"),
        "{text}"
    );
    assert_eq!(
        column(heading, "MESSAGE"),
        column(throttle, "N/A"),
        "{text}"
    );
    let nodes = text
        .lines()
        .find(|l| l.contains("NODE") && l.contains("GPUS"))
        .unwrap();
    let gpu_count = column(nodes, "GPUS") + 3;
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("79.1G/158G")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows.iter().all(|r| r[gpu_count..].starts_with('2')),
        "{text}"
    );
    assert_eq!(
        text.matches(host).count(),
        1 + 2 + 1,
        "node, ranks, warning: {text}"
    );
    // The TUI still cuts to its screen.
    let tui = screen(&app, 120, 40);
    assert!(tui.contains("gpu-node-017.rack-07.cl…"), "{tui}");
}

#[test]
fn a_node_that_is_down_is_a_critical_warning_in_the_text_the_json_and_the_exit_status() {
    let mut app = ClusterApp::new("http://prometheus:9090".into(), 20.0, true);
    app.on_fetch(fetched_with_node_c_down(), "12:00:01 UTC".into());
    let text = render::once_text(&app);
    assert!(text.contains("3 warnings"), "{text}");
    let row = text
        .lines()
        .find(|l| l.contains("node-down"))
        .unwrap_or_else(|| {
            panic!("no node-down warning:\n{text}");
        });
    assert!(
        row.starts_with("  CRIT node-c")
            && row.ends_with(
                "host     node-c is down: last seen 42 s ago; Prometheus cannot scrape its \
                 exporter at 10.0.0.3:9400"
            ),
        "{text}"
    );
    let doc = serde_json::to_value(&app.view).unwrap();
    let ids: Vec<&str> = (doc["warnings"].as_array().unwrap().iter())
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["oom-risk", "node-down", "throttle"],
        "by severity, then node"
    );
    let down = &doc["warnings"][1];
    assert_eq!(
        (&down["severity"], &down["hostname"], &down["subject"]),
        (&"critical".into(), &"node-c".into(), &"host".into()),
        "{doc:#}"
    );
    assert_eq!(down["last_seen_seconds_ago"], 42.0, "{doc:#}");
    assert!(down["message"].as_str().unwrap().contains("10.0.0.3:9400"));
    assert_eq!(doc["nodes"][2]["warnings"], 1, "{doc:#}");
    let critical = Some(crate::model::Severity::Critical);
    assert_eq!(
        super::warnings::exit_status(&app.view.warnings, critical),
        4
    );
    // Without node-c down, the worst warning of the same view is node-a's oom-risk: critical
    // too, so the status is the rule's, not node-down's alone.
    let mut up = ClusterApp::new("u".into(), 20.0, true);
    let mut only_warn = fetched();
    only_warn.warnings = Ok(vec![warnings().remove(0)]);
    up.on_fetch(only_warn, "t".into());
    assert_eq!(super::warnings::exit_status(&up.view.warnings, critical), 0);
}

/// A cron check whose warnings query failed exited 0, as if every node were well.
#[test]
fn once_exits_1_when_the_warnings_could_not_be_read_and_nothing_read_decides() {
    let critical = Some(crate::model::Severity::Critical);
    let status = |fetched: Fetched, fail_at| {
        let mut app = ClusterApp::new("u".into(), 20.0, true);
        app.on_fetch(fetched, "t".into());
        super::warnings::once_status(&app, fail_at)
    };
    let failed = || Err("Prometheus answered 503".to_string());
    let mut calm = fetched();
    calm.warnings = Ok(Vec::new());
    assert_eq!(
        status(calm, critical),
        0,
        "every query answered, no warning"
    );
    let mut unread = fetched();
    unread.warnings = failed();
    assert_eq!(status(unread, critical), 1);
    let mut unread = fetched();
    unread.warnings = failed();
    assert_eq!(status(unread, None), 0, "--fail-on never");
    let mut down = fetched_with_node_c_down();
    down.warnings = failed();
    assert_eq!(
        status(down, critical),
        4,
        "node-down is read from the nodes"
    );
    let mut no_nodes = fetched();
    no_nodes.nodes = failed();
    assert_eq!(status(no_nodes, None), 1);
}

#[test]
fn warnings_a_node_exports_have_no_message_and_say_where_it_is() {
    let text = render::once_text(&app());
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("oom-risk") || l.contains("throttle"))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows.iter().all(|r| r.ends_with(" N/A")), "{text}");
    assert!(
        text.ends_with(
            "  N/A: `torchtop serve` exports no message; `torchtop` on the node shows it (w)"
        ),
        "{text}"
    );
    let doc = serde_json::to_value(&app().view).unwrap();
    for warning in doc["warnings"].as_array().unwrap() {
        // There, as null: not left out, which would read as an older document.
        let null = Some(&serde_json::Value::Null);
        assert_eq!(warning.get("message"), null, "{warning:#}");
        assert_eq!(warning.get("last_seen_seconds_ago"), null, "{warning:#}");
    }
}

#[test]
fn one_of_a_thing_is_singular() {
    let mut app = ClusterApp::new("http://prometheus:9090".into(), 20.0, true);
    let one_rank = |world_size: Option<&str>| {
        let mut l = vec![
            ("Hostname", "node-a"),
            ("pid", "4100"),
            ("rank", "0"),
            ("gpu", "0"),
            ("training_job", "j"),
        ];
        l.extend(world_size.map(|w| ("world_size", w)));
        vec![sample("torchtop_process_gpu_memory_bytes", &l, 1e9)]
    };
    let mut fetched = fetched();
    fetched.nodes = Ok(gpus("node-a", 1));
    fetched.jobs = Ok(one_rank(None));
    fetched.warnings = Ok(vec![warnings().remove(1)]);
    app.on_fetch(fetched.clone(), "12:00:01 UTC".into());
    let text = render::once_text(&app);
    assert!(
        text.contains("  1 node  1 GPU  1 job  1 warning  "),
        "{text}"
    );
    assert!(text.contains("JOB j  1 rank on 1 node  "), "{text}");
    fetched.jobs = Ok(one_rank(Some("1")));
    app.on_fetch(fetched.clone(), "12:00:02 UTC".into());
    assert!(render::once_text(&app).contains("JOB j  1 of 1 rank on 1 node  "));
    fetched.jobs = Ok(one_rank(Some("2")));
    app.on_fetch(fetched, "12:00:03 UTC".into());
    let text = render::once_text(&app);
    assert!(
        text.contains("JOB j  1 of 2 ranks on 1 node, 1 missing  "),
        "{text}"
    );
    let two = render::once_text(&self::app());
    assert!(
        two.contains("  2 nodes  4 GPUs  1 job  2 warnings  "),
        "{two}"
    );
    assert!(two.contains("4 ranks on 2 nodes  "), "{two}");
}

/// What the review's fake Prometheus answered: every figure of node-a's GPUs, node-c's
/// "last seen", a rank's step time and world size at 1.7e308 or other values no exporter can
/// say. Each is unknown, as NVML's implausible readings are; none reaches the text as digits.
fn fetched_with_absurd_figures() -> Fetched {
    let mut fetched = fetched_with_node_c_down();
    for sample in fetched.nodes.as_mut().unwrap().iter_mut() {
        if sample.name() != "torchtop_gpu_state" {
            sample.value = 1.7e308;
        }
    }
    fetched.history = Ok(vec![Range {
        labels: [("Hostname".into(), "node-a".into())].into_iter().collect(),
        points: vec![(0.0, 1e308), (1.0, -1e308), (2.0, 40.0)],
    }]);
    for sample in fetched.jobs.as_mut().unwrap().iter_mut() {
        let rank = sample.label("rank").unwrap_or_default().to_string();
        if sample.name() == "torchtop_step_time_seconds" && rank == "1" {
            sample.value = 1.7e308;
        }
        if sample.name() == "torchtop_step_time_seconds" && rank == "2" {
            sample.value = -5.0;
        }
        if sample.name() == "torchtop_process_gpu_memory_bytes" {
            sample.value = 1.7e308;
        }
        if sample.name() == RANK_LOST && rank == "5" {
            sample.labels.insert("rank".into(), "4294967295".into());
            sample
                .labels
                .insert("world_size".into(), "4294967295".into());
        }
    }
    fetched
}

#[test]
fn figures_no_exporter_can_say_are_unknown() {
    let mut app = ClusterApp::new("http://prometheus:9090".into(), 20.0, true);
    app.on_fetch(fetched_with_absurd_figures(), "12:00:01 UTC".into());
    let text = render::once_text(&app);
    assert!(
        !text.contains("inf") && !text.contains("99999") && !text.contains("4294967295"),
        "{text}"
    );
    let row = |start: &str| {
        let line = text.lines().find(|l| l.starts_with(start));
        line.unwrap_or_else(|| panic!("no row {start:?}:\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("  node-a")[..6],
        ["node-a", "2", "N/A", "N/A", "N/A/N/A", "N/A"]
    );
    assert!(
        text.contains("node-c is down: not seen in the last 10 min"),
        "{text}"
    );
    let view = &app.view;
    assert_eq!(view.nodes[0].utilization_history, [40.0]);
    let gpu = &view.nodes[0].gpus[0];
    assert_eq!(
        (
            gpu.utilization_percent,
            gpu.memory_used_bytes,
            gpu.temperature_c,
            gpu.power_w
        ),
        (None, None, None, None)
    );
    let job = &view.jobs[0];
    assert_eq!(job.world_size, None, "{job:?}");
    let steps: Vec<_> = job.ranks.iter().map(|r| r.step_time_seconds).collect();
    assert_eq!(steps, [Some(0.412), None, None, Some(0.731)]);
    assert!(
        job.ranks.iter().all(|r| r.memory_bytes.is_none()),
        "{job:?}"
    );
    let lost: Vec<_> = job.missing_ranks.iter().map(|m| m.rank).collect();
    assert_eq!(lost, [Some(4), None]);
}
