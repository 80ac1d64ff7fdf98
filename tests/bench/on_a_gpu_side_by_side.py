"""torchtop, nvtop and nvitop side by side on a real NVIDIA driver, and what each NVML call costs.

The overhead benchmark (`cargo bench --bench overhead`) compares the three against the fake NVML,
whose calls cost next to nothing, so that the fixed costs of each monitor decide. On a real
driver each NVML call is an ioctl into the kernel module, and some calls block (the PCIe
throughput counters sample over 20 ms). This script, for a machine with a GPU:

1. times each NVML call torchtop makes per reading (through nvidia-ml-py, which adds about a
   microsecond of Python to each), in wall time and in this thread's CPU time;
2. runs torchtop (-d 1), nvtop (-d 10) and nvitop (--monitor full --interval 1) at the same time,
   each in a 120x40 pseudo-terminal, and reads each one's CPU (all threads' schedstat) and
   context switches over a window after a warm-up: first with the GPU idle, then while
   tests/bench/agent_step_cost.py's model trains on it.

Run: python3 tests/bench/on_a_gpu_side_by_side.py TORCHTOP [NVTOP] [--window S]
A tool whose path is missing or empty is left out. Prints only.
"""

import argparse
import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def nvml_call_costs():
    try:
        import pynvml as n
    except ImportError:
        print("nvidia-ml-py is not installed: no per-call figures")
        return
    started = time.perf_counter()
    n.nvmlInit()
    print("nvmlInit: %.1f ms" % ((time.perf_counter() - started) * 1e3))
    handle = n.nvmlDeviceGetHandleByIndex(0)
    events = n.nvmlEventSetCreate()
    try:
        n.nvmlDeviceRegisterEvents(handle, n.nvmlEventTypeXidCriticalError, events)
    except n.NVMLError as error:
        print("xid events: %s" % error)
    calls = [
        ("utilization_rates", lambda: n.nvmlDeviceGetUtilizationRates(handle)),
        ("memory_info", lambda: n.nvmlDeviceGetMemoryInfo(handle)),
        ("throttle_reasons", lambda: n.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        ("total_energy", lambda: n.nvmlDeviceGetTotalEnergyConsumption(handle)),
        ("temperature", lambda: n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU)),
        ("power_usage", lambda: n.nvmlDeviceGetPowerUsage(handle)),
        ("clock sm", lambda: n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM)),
        ("clock mem", lambda: n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_MEM)),
        ("pcie_throughput rx", lambda: n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_RX_BYTES)),
        ("pcie_throughput tx", lambda: n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_TX_BYTES)),
        ("encoder_utilization", lambda: n.nvmlDeviceGetEncoderUtilization(handle)),
        ("decoder_utilization", lambda: n.nvmlDeviceGetDecoderUtilization(handle)),
        ("performance_state", lambda: n.nvmlDeviceGetPerformanceState(handle)),
        ("compute processes", lambda: n.nvmlDeviceGetComputeRunningProcesses(handle)),
        ("graphics processes", lambda: n.nvmlDeviceGetGraphicsRunningProcesses(handle)),
        ("process utilization", lambda: n.nvmlDeviceGetProcessUtilization(handle, 0)),
        ("mig_mode", lambda: n.nvmlDeviceGetMigMode(handle)),
        ("event_set_wait(0)", lambda: n.nvmlEventSetWait(events, 0)),
        ("slow: remapped_rows", lambda: n.nvmlDeviceGetRemappedRows(handle)),
        ("slow: ecc volatile", lambda: n.nvmlDeviceGetTotalEccErrors(
            handle, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC)),
        ("slow: enforced_power_limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(handle)),
        ("slow: retired pages pending", lambda: n.nvmlDeviceGetRetiredPagesPendingStatus(handle)),
    ]
    wall_total = cpu_total = 0.0
    print("%-30s %12s %12s   (median of 50 calls each)" % ("NVML call", "wall us", "CPU us"))
    for name, call in calls:
        walls, cpus, failure = [], [], None
        for _ in range(50):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                call()
            except n.NVMLError as error:
                failure = str(error)
            cpus.append(time.thread_time() - cpu)
            walls.append(time.perf_counter() - wall)
        walls.sort()
        cpus.sort()
        wall_us, cpu_us = walls[25] * 1e6, cpus[25] * 1e6
        if not name.startswith("slow"):
            wall_total += wall_us
            cpu_total += cpu_us
        print("%-30s %12.1f %12.1f   %s" % (name, wall_us, cpu_us, failure or ""))
    print("per reading (the calls not marked slow): %.1f ms of wall time, %.2f ms of CPU"
          % (wall_total / 1e3, cpu_total / 1e3))
    n.nvmlShutdown()


def spawn_in_pty(argv, env=None):
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        if env:
            os.environ.update(env)
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    drain = threading.Thread(target=drain_forever, args=(fd,), daemon=True)
    drain.start()
    return pid, fd


def drain_forever(fd):
    while True:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def cpu_and_switches(pid):
    """(CPU ns, context switches) of all the process's threads, or None once it is gone."""
    cpu = switches = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            base = "/proc/%d/task/%s/" % (pid, tid)
            try:
                with open(base + "schedstat") as f:
                    cpu += int(f.read().split()[0])
                with open(base + "status") as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                            switches += int(line.split()[1])
            except (OSError, ValueError):
                continue
    except OSError:
        return None
    return cpu, switches


def side_by_side(tools, window, label):
    print("\n%s: %d s window after 3 s, CPU of all threads and context switches" % (label, window))
    running = []
    for name, argv, env in tools:
        pid, fd = spawn_in_pty(argv, env)
        running.append((name, pid, fd))
    time.sleep(3)
    before = {name: cpu_and_switches(pid) for name, pid, _ in running}
    started = time.monotonic()
    time.sleep(window)
    took = time.monotonic() - started
    for name, pid, fd in running:
        after = cpu_and_switches(pid)
        if before[name] is None or after is None:
            print("  %-9s exited early" % name)
        else:
            print("  %-9s %7.2f ms/s of CPU  %6.1f context switches/s"
                  % (name, (after[0] - before[name][0]) / 1e6 / took, (after[1] - before[name][1]) / took))
        os.kill(pid, signal.SIGTERM)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        os.close(fd)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("torchtop")
    parser.add_argument("nvtop", nargs="?", default="")
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args()
    nvml_call_costs()
    tools = [("torchtop", [os.path.realpath(args.torchtop)], None)]
    if args.nvtop and os.path.exists(args.nvtop):
        tools.append(("nvtop", [args.nvtop, "-d", "10"], None))
    try:
        import nvitop  # noqa: F401
        tools.append(("nvitop", [sys.executable, "-m", "nvitop", "--monitor", "full", "--interval", "1"],
                      {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}))
    except ImportError:
        print("nvitop is not importable: left out")
    side_by_side(tools, args.window, "GPU idle")
    train = subprocess.Popen([sys.executable, "-c", TRAIN, HERE, str(args.window + 25)])
    time.sleep(12)
    side_by_side(tools, args.window, "GPU training (agent_step_cost's model, no agent)")
    train.wait()


TRAIN = r'''
import sys, time
sys.path.insert(0, sys.argv[1])
from agent_step_cost import Trainer
import torch
trainer = Trainer(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    trainer.step()
trainer.sync()
'''

if __name__ == "__main__":
    main()
