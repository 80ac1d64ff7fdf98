//! Builds a fake amdgpu node under a directory, in the kernel's own formats: the sysfs tree of
//! two MI300X cards (`sys/class/drm/cardN/device`, its `hwmon/`, the `driver` link) next to an
//! NVIDIA card and the DRM connector and render entries the collector must skip, and the
//! `proc/PID/fd` + `proc/PID/fdinfo` of three processes in the DRM usage-stats format.
//!
//! Shared by the collector's unit tests (through `include!`) and the end-to-end tests; it uses
//! only std.

use std::path::Path;

/// PCI addresses of the two cards, in the order ROCm numbers them.
pub const MI300_PDEVS: [&str; 2] = ["0000:0c:00.0", "0000:22:00.0"];

/// One DRM client, as an fdinfo file says it.
#[derive(Clone, Copy)]
pub struct Client<'a> {
    pub pdev: &'a str,
    pub id: u64,
    pub vram_kib: u64,
    pub gtt_kib: u64,
    pub gfx_ns: u64,
    pub compute_ns: u64,
}

impl Client<'_> {
    /// The fdinfo text amdgpu writes for this client (kernel 6.8 layout).
    pub fn fdinfo(&self) -> String {
        format!(
            "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1067\ndrm-driver:\tamdgpu\n\
             drm-client-id:\t{}\ndrm-pdev:\t{}\npasid:\t32772\n\
             drm-memory-vram:\t{} KiB\ndrm-memory-gtt: \t{} KiB\ndrm-memory-cpu: \t0 KiB\n\
             amd-memory-visible-vram:\t0 KiB\namd-evicted-vram:\t0 KiB\n\
             drm-engine-gfx:\t{} ns\ndrm-engine-compute:\t{} ns\ndrm-engine-dma:\t0 ns\n",
            self.id, self.pdev, self.vram_kib, self.gtt_kib, self.gfx_ns, self.compute_ns
        )
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn link(target: &str, at: &Path) {
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(at);
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// One card's device directory with its files; `hwmon` holds (file, value) pairs.
fn card(root: &Path, card: &str, pdev: &str, driver: &str, files: &[(&str, &str)]) {
    let device = root.join("sys/devices/pci0000:00").join(pdev);
    for (name, value) in files {
        write(&device.join(name), value);
    }
    link(
        &format!("../../../bus/pci/drivers/{driver}"),
        &device.join("driver"),
    );
    link(
        &format!("../../../devices/pci0000:00/{pdev}"),
        &root.join("sys/class/drm").join(card).join("device"),
    );
}

/// The two-card MI300X node: card1 is 0000:0c:00.0 and card0 0000:22:00.0 (so that PCI order
/// differs from card order), card2 is an NVIDIA card.
pub fn write_mi300_node(root: &Path) {
    let vram_total = (192u64 << 30).to_string();
    let gtt_total = (251u64 << 30).to_string();
    card(
        root,
        "card1",
        MI300_PDEVS[0],
        "amdgpu",
        &[
            ("product_name", "AMD Instinct MI300X\n"),
            ("unique_id", "5f4a9c12d3b7e801\n"),
            ("gpu_busy_percent", "93\n"),
            ("mem_busy_percent", "37\n"),
            ("mem_info_vram_total", &format!("{vram_total}\n")),
            ("mem_info_vram_used", &format!("{}\n", 150u64 << 30)),
            ("mem_info_gtt_total", &format!("{gtt_total}\n")),
            ("mem_info_gtt_used", &format!("{}\n", 2u64 << 30)),
            ("pp_dpm_sclk", "0: 500Mhz\n1: 1900Mhz *\n2: 2100Mhz\n"),
            ("pp_dpm_mclk", "0: 900Mhz\n1: 1300Mhz *\n"),
            ("hwmon/hwmon3/temp2_input", "67000\n"),
            ("hwmon/hwmon3/temp2_label", "junction\n"),
            ("hwmon/hwmon3/power1_average", "612000000\n"),
            ("hwmon/hwmon3/power1_cap", "750000000\n"),
        ],
    );
    card(
        root,
        "card0",
        MI300_PDEVS[1],
        "amdgpu",
        &[
            ("product_name", "AMD Instinct MI300X\n"),
            ("unique_id", "a01c77e3b2f94d56\n"),
            ("gpu_busy_percent", "41\n"),
            ("mem_busy_percent", "12\n"),
            ("mem_info_vram_total", &format!("{vram_total}\n")),
            ("mem_info_vram_used", &format!("{}\n", 20u64 << 30)),
            ("mem_info_gtt_total", &format!("{gtt_total}\n")),
            ("mem_info_gtt_used", &format!("{}\n", 1u64 << 30)),
            ("pp_dpm_sclk", "S: 19Mhz\n0: 500Mhz *\n1: 2100Mhz\n"),
            ("pp_dpm_mclk", "0: 900Mhz\n1: 1300Mhz *\n"),
            ("hwmon/hwmon4/temp1_input", "52000\n"),
            ("hwmon/hwmon4/power1_input", "250000000\n"),
            ("hwmon/hwmon4/power1_cap", "750000000\n"),
            ("hwmon/hwmon4/pwm1", "128\n"),
            ("hwmon/hwmon4/pwm1_max", "255\n"),
        ],
    );
    card(
        root,
        "card2",
        "0000:41:00.0",
        "nvidia",
        &[("gpu_busy_percent", "5\n")],
    );
    // Connector and render entries of card0, which are not cards of their own.
    link(
        "../../devices/pci0000:00/0000:22:00.0/drm/card0-DP-1",
        &root.join("sys/class/drm/card0-DP-1"),
    );
    link(
        "../../devices/pci0000:00/0000:22:00.0/drm/renderD128",
        &root.join("sys/class/drm/renderD128"),
    );
}

/// Gives `pid` an fd `fd` on a render node with `fdinfo` as its fdinfo text.
pub fn write_drm_fd(root: &Path, pid: u32, fd: u32, fdinfo: &str) {
    let dir = root.join("proc").join(pid.to_string());
    link("/dev/dri/renderD128", &dir.join("fd").join(fd.to_string()));
    write(&dir.join("fdinfo").join(fd.to_string()), fdinfo);
}

/// The three processes: `pids[0]` on the first card (48 GiB), `pids[1]` on the second
/// (16 GiB), `pids[2]` on both (4 GiB each), its first client reachable through two
/// descriptors. Engine counters start at `ns_base` and grow by `elapsed_ns` times each
/// process's share (50%, 25%, 10%).
pub fn write_mi300_processes(root: &Path, pids: [u32; 3], elapsed_ns: u64) {
    let base = 1_000_000_000_000u64;
    let [a, b] = MI300_PDEVS;
    let clients = [
        (
            pids[0],
            4,
            Client {
                pdev: a,
                id: 7,
                vram_kib: 48 << 20,
                gtt_kib: 512 << 10,
                gfx_ns: 0,
                compute_ns: base + elapsed_ns / 2,
            },
        ),
        (
            pids[1],
            4,
            Client {
                pdev: b,
                id: 9,
                vram_kib: 16 << 20,
                gtt_kib: 256 << 10,
                gfx_ns: 0,
                compute_ns: base + elapsed_ns / 4,
            },
        ),
        (
            pids[2],
            5,
            Client {
                pdev: a,
                id: 12,
                vram_kib: 4 << 20,
                gtt_kib: 0,
                gfx_ns: base + elapsed_ns / 10,
                compute_ns: 0,
            },
        ),
        (
            pids[2],
            6,
            Client {
                pdev: a,
                id: 12,
                vram_kib: 4 << 20,
                gtt_kib: 0,
                gfx_ns: base + elapsed_ns / 10,
                compute_ns: 0,
            },
        ),
        (
            pids[2],
            7,
            Client {
                pdev: b,
                id: 13,
                vram_kib: 4 << 20,
                gtt_kib: 0,
                gfx_ns: 0,
                compute_ns: base + elapsed_ns / 10,
            },
        ),
    ];
    for (pid, fd, client) in clients {
        write_drm_fd(root, pid, fd, &client.fdinfo());
    }
    for pid in pids {
        let dir = root.join("proc").join(pid.to_string());
        link("/dev/null", &dir.join("fd/0"));
        write(
            &dir.join("fdinfo/0"),
            "pos:\t0\nflags:\t0100002\nmnt_id:\t5\nino:\t4\n",
        );
    }
}
