//! The amdgpu collector against a fixture node in the kernel's formats.

use std::path::Path;
use std::time::{Duration, Instant};

use super::fdinfo::{parse_fdinfo, scan_clients, ClientScanner, EngineClock};
use super::sysfs::{current_dpm_mhz, find_cards};
use super::AmdSource;
use crate::model::GpuVendor;

#[allow(dead_code, unreachable_pub)]
#[path = "../../../tests/common/amd_fixture.rs"]
mod fixture;
use fixture::{write_drm_fd, write_mi300_node, write_mi300_processes, Client, MI300_PDEVS};

const PIDS: [u32; 3] = [4101, 4102, 4103];

fn node() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_mi300_node(dir.path());
    write_mi300_processes(dir.path(), PIDS, 0);
    dir
}

#[test]
fn only_amdgpu_cards_are_found_in_pci_order() {
    let dir = node();
    let cards = find_cards(dir.path());
    let pdevs: Vec<&str> = cards.iter().map(|c| c.pdev.as_str()).collect();
    assert_eq!(pdevs, MI300_PDEVS);
    assert!(cards[0].device_dir.ends_with("card1/device"));
}

#[test]
fn a_card_reads_every_sysfs_and_hwmon_figure() {
    let dir = node();
    let source = AmdSource::load(dir.path());
    assert_eq!(source.count(), 2);
    let first = source.open(0, 3).read().unwrap();
    let gpu = &first.sample;
    assert_eq!(gpu.vendor, GpuVendor::Amd);
    assert_eq!((gpu.index, gpu.vendor_index), (3, Some(0)));
    assert_eq!(gpu.name.as_deref(), Some("AMD Instinct MI300X"));
    assert_eq!(gpu.uuid.as_deref(), Some("GPU-5f4a9c12d3b7e801"));
    assert_eq!(gpu.bus_id.as_deref(), Some("0000:0c:00.0"));
    assert_eq!(gpu.utilization_percent, Some(93));
    assert_eq!(gpu.memory_utilization_percent, Some(37));
    assert_eq!(gpu.memory_total_bytes, Some(192 << 30));
    assert_eq!(gpu.memory_used_bytes, Some(150 << 30));
    assert_eq!(gpu.memory_free_bytes, Some(42 << 30));
    assert_eq!(gpu.gtt_used_bytes, Some(2 << 30));
    assert_eq!(gpu.gtt_total_bytes, Some(251 << 30));
    assert_eq!(
        (gpu.sm_clock_mhz, gpu.memory_clock_mhz),
        (Some(1900), Some(1300))
    );
    assert_eq!(
        gpu.temperature_c,
        Some(67),
        "junction sensor when there is no edge"
    );
    assert_eq!(gpu.power_w, Some(612.0));
    assert_eq!(gpu.power_limit_w, Some(750.0));
    assert_eq!(gpu.fan_percent, None, "MI300X has no fan: N/A, not 0");

    let second = source.open(1, 4).read().unwrap().sample;
    assert_eq!(second.temperature_c, Some(52));
    assert_eq!(
        second.power_w,
        Some(250.0),
        "power1_input without an average"
    );
    assert_eq!(second.fan_percent, Some(50));
    assert_eq!(second.sm_clock_mhz, Some(500));
}

#[test]
fn processes_get_their_vram_once_per_client() {
    let dir = node();
    let source = AmdSource::load(dir.path());
    let first = source.open(0, 0).read().unwrap().processes;
    let rows: Vec<(u32, Option<u64>)> = first.iter().map(|p| (p.pid, p.gpu_memory_bytes)).collect();
    // pids[2] holds client 12 through two fds: 4 GiB, not 8.
    assert_eq!(rows, [(4101, Some(48 << 30)), (4103, Some(4 << 30))]);
    let second = source.open(1, 1).read().unwrap().processes;
    let rows: Vec<(u32, u32)> = second.iter().map(|p| (p.pid, p.gpu)).collect();
    assert_eq!(rows, [(4102, 1), (4103, 1)]);
}

#[test]
fn engine_time_becomes_a_share_between_two_scans() {
    let dir = node();
    let proc_root = dir.path().join("proc");
    let mut clock = EngineClock::default();
    let start = Instant::now();
    let first = clock.usage(&scan_clients(&proc_root), start);
    assert!(first.values().flatten().all(|u| u.engine_percent.is_none()));
    write_mi300_processes(dir.path(), PIDS, 2_000_000_000);
    let later = clock.usage(&scan_clients(&proc_root), start + Duration::from_secs(2));
    let share = |pdev: &str, pid: u32| {
        later[pdev]
            .iter()
            .find(|u| u.pid == pid)
            .unwrap()
            .engine_percent
    };
    assert_eq!(share(MI300_PDEVS[0], 4101), Some(50));
    assert_eq!(share(MI300_PDEVS[1], 4102), Some(25));
    assert_eq!(share(MI300_PDEVS[0], 4103), Some(10));
    assert_eq!(share(MI300_PDEVS[1], 4103), Some(10));
}

#[test]
fn malformed_fdinfo_lines_give_na_and_never_panic() {
    let text = "drm-driver:\tamdgpu\ndrm-client-id:\tseven\ndrm-pdev:\t0000:0c:00.0\n\
                drm-memory-vram:\t12 furlongs\ndrm-memory-gtt:\t-5 KiB\n\
                drm-engine-gfx:\t99999999999999999999999 ns\ndrm-engine-compute:\t12\n\
                garbage line without colon\n:\n\u{0}\u{1b}[2J:\u{ff}\n";
    let info = parse_fdinfo(text);
    assert_eq!(info.driver.as_deref(), Some("amdgpu"));
    assert_eq!(info.client_id, None);
    assert_eq!(info.vram_bytes, None);
    assert_eq!(info.gtt_bytes, None);
    assert_eq!((info.gfx_ns, info.compute_ns), (None, None));

    let dir = node();
    write_drm_fd(dir.path(), 4200, 3, text);
    write_drm_fd(dir.path(), 4201, 3, &"drm-driver: amdgpu\n".repeat(100_000));
    let source = AmdSource::load(dir.path());
    let rows = source.open(0, 0).read().unwrap().processes;
    let bad = rows.iter().find(|p| p.pid == 4200).expect("the row stays");
    assert_eq!((bad.gpu_memory_bytes, bad.sm_percent), (None, None));
    assert!(
        !rows.iter().any(|p| p.pid == 4201),
        "no pdev: not attributed to any card"
    );
}

#[test]
fn units_and_newer_key_names_are_understood() {
    let info = parse_fdinfo(
        "drm-driver: amdgpu\ndrm-resident-vram: 3 MiB\ndrm-total-vram: 9 MiB\ndrm-memory-gtt: 512\n",
    );
    assert_eq!(info.vram_bytes, Some(3 << 20));
    assert_eq!(info.gtt_bytes, Some(512));
    let client = Client {
        pdev: "p",
        id: 1,
        vram_kib: 2,
        gtt_kib: 1,
        gfx_ns: 5,
        compute_ns: 6,
    };
    let parsed = parse_fdinfo(&client.fdinfo());
    assert_eq!(
        (parsed.vram_bytes, parsed.gfx_ns, parsed.compute_ns),
        (Some(2048), Some(5), Some(6))
    );
}

#[test]
fn dpm_tables_and_missing_trees() {
    assert_eq!(current_dpm_mhz("0: 500Mhz\n1: 1200Mhz *\n"), Some(1200));
    assert_eq!(current_dpm_mhz("0: 500Mhz\n1: 1200Mhz\n"), None);
    assert_eq!(current_dpm_mhz("1: fast *\n"), None);
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(AmdSource::load(empty.path()).count(), 0);
    assert!(find_cards(Path::new("/nonexistent/torchtop")).is_empty());
}

#[test]
fn new_descriptors_are_found_by_the_next_full_scan_and_closed_ones_drop_at_once() {
    let dir = node();
    let mut scanner = ClientScanner::new(dir.path().join("proc"));
    let start = Instant::now();
    let pids_of = |clients: &[super::fdinfo::DrmClient]| {
        clients
            .iter()
            .map(|c| (c.pid, c.info.client_id))
            .collect::<Vec<_>>()
    };
    assert_eq!(scanner.scan(start).len(), 4);
    let late = Client {
        pdev: MI300_PDEVS[1],
        id: 40,
        vram_kib: 1,
        gtt_kib: 0,
        gfx_ns: 0,
        compute_ns: 0,
    };
    write_drm_fd(dir.path(), 4101, 11, &late.fdinfo());
    let soon = scanner.scan(start + Duration::from_secs(1));
    assert!(
        !pids_of(&soon).contains(&(4101, Some(40))),
        "between full scans"
    );
    let later = scanner.scan(start + Duration::from_secs(6));
    assert!(
        pids_of(&later).contains(&(4101, Some(40))),
        "found by the full scan"
    );
    std::fs::remove_file(dir.path().join("proc/4102/fdinfo/4")).unwrap();
    let closed = scanner.scan(start + Duration::from_secs(7));
    assert!(!pids_of(&closed).iter().any(|(pid, _)| *pid == 4102));
}
