"""NVML's cumulative PCIe byte counters against its 20 ms PCIe samples, and the resident memory
of torchtop and nvtop, on a machine with a GPU.

torchtop reads PCIe throughput with nvmlDeviceGetPcieThroughput, which samples for 20 ms in the
driver. The byte counters (nvmlDeviceGetFieldValues, fields 197 TX and 198 RX) would spare that
wait if they counted forward; this times them and compares both at rest and under host-to-device
copies. Then it starts torchtop and nvtop (at /tmp/nvtop) in 120x40 pseudo-terminals and reads
VmRSS, RssAnon and RssFile after 5 s.

Run from the repository root: python3 tests/bench/on_a_gpu_pcie_counters.py  (needs
nvidia-ml-py and CUDA torch; target/release/torchtop built). Prints only.
"""

import statistics, threading, time
import pynvml as n
import torch
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
TX, RX = 197, 198
def fields():
    values = n.nvmlDeviceGetFieldValues(h, [TX, RX])
    return [(v.nvmlReturn, v.timestamp, v.value.ullVal) for v in values]
print("fields:", fields())
walls, cpus = [], []
for _ in range(50):
    w, c = time.perf_counter(), time.thread_time()
    fields()
    cpus.append(time.thread_time() - c); walls.append(time.perf_counter() - w)
print("nvmlDeviceGetFieldValues(TX, RX): median %.1f us wall, %.1f us CPU" % (statistics.median(walls) * 1e6, statistics.median(cpus) * 1e6))
host = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
stop = False
def copy():
    while not stop:
        dev.copy_(host, non_blocking=True); torch.cuda.synchronize()
for label, work in (("idle", False), ("host-to-device copies", True)):
    if work:
        t = threading.Thread(target=copy); t.start(); time.sleep(1)
    for _ in range(3):
        a = fields(); t0 = time.monotonic(); time.sleep(1.0); b = fields(); t1 = time.monotonic()
        rx_s = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES)
        tx_s = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)
        dts = (b[0][1] - a[0][1]) / 1e6
        print("%s: counters over %.3f s (field timestamps %.3f s): tx %.1f MiB/s rx %.1f MiB/s | sampled 20 ms: tx %.1f MiB/s rx %.1f MiB/s"
              % (label, t1 - t0, dts, (b[0][2] - a[0][2]) / (t1 - t0) / 2**20, (b[1][2] - a[1][2]) / (t1 - t0) / 2**20, tx_s / 1024, rx_s / 1024))
    if work:
        stop = True; t.join()

import os, pty, sys, signal
def rss_of(argv, env=None):
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        if env: os.environ.update(env)
        os.execv(argv[0], argv)
    import fcntl, struct, termios
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try: os.read(fd, 65536)
        except OSError: break
    fields = {}
    for line in open("/proc/%d/status" % pid):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads"): fields[k] = v.strip()
    os.kill(pid, signal.SIGTERM); os.waitpid(pid, 0)
    print(argv[0].rsplit("/", 1)[-1], fields)
rss_of([os.path.realpath("target/release/torchtop")])
rss_of(["/tmp/nvtop", "-d", "10"])
