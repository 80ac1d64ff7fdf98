"""What the agent costs the training process per stats interval, as a share of the default 1 s.

Each interval the agent's thread builds its hello (sent again only when it changed), reads
`torch.cuda.memory_stats(i)` for each device the program uses, and JSON-encodes one stats line
per connected monitor. This times exactly that work (`_hello`, `_stats`, one `json.dumps`),
without a socket, in two settings:

- the stand-in torch (tests/python/fake_torch) with CUDA "initialized" on 1 and 8 devices: the
  shape of the cost with device statistics (a real allocator's dict has about as many keys);
- the real torch of the Python running this script, if it has one. A CPU-only machine has no
  CUDA: `torch.cuda.is_initialized()` is false, so the agent reads no device and its interval
  is the hello and an empty stats line. `memory_stats(0)` is timed directly too, where torch
  lets it be called.

Run: python3 tests/bench/agent_interval_cost.py  (the overhead benchmark runs it; prints only)
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ROUNDS = 2000
INTERVAL_S = 1.0


def per_call_us(fn, rounds=ROUNDS):
    fn()
    best = None
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds // 5):
            fn()
        took = (time.perf_counter() - started) / (rounds // 5)
        best = took if best is None else min(best, took)
    return best * 1e6


def interval_cost(label, devices_note):
    import torchtop_agent

    agent = torchtop_agent._Agent(os.path.join("/tmp", "torchtop-bench-%d.sock" % os.getpid()), 1000)
    torch = sys.modules["torch"]
    calls = getattr(torch.cuda, "_calls", None)

    def one_interval():
        agent._hello()
        json.dumps(agent._stats(), separators=(",", ":"), default=str)
        if calls is not None:
            del calls[:]  # the stand-in logs calls; keep that list from growing

    us = per_call_us(one_interval)
    print("agent, %s (%s): %.0f µs per interval = %.4f %% of a 1 s interval"
          % (label, devices_note, us, us / (INTERVAL_S * 1e6) * 100))


def stand_in(devices):
    sys.path[:0] = [os.path.join(ROOT, "assets", "python"),
                    os.path.join(ROOT, "tests", "python", "fake_torch")]
    import torch

    torch.cuda._device_count = devices
    torch.cuda._fake_init(tuple(range(devices)))
    calls = torch.cuda._calls
    stats_us = per_call_us(lambda: (torch.cuda.memory_stats(0), calls.clear()))
    print("stand-in torch: memory_stats(0) %.1f µs (%d keys)" % (stats_us, len(torch.cuda.memory_stats(0))))
    interval_cost("stand-in torch", "%d devices in use" % devices)


def real():
    sys.path[:0] = [os.path.join(ROOT, "assets", "python")]
    try:
        import torch
    except ImportError:
        print("real torch: not installed in %s (TORCHTOP_BENCH_PYTHON names one that has it)" % sys.executable)
        return
    try:
        stats_us = per_call_us(lambda: torch.cuda.memory_stats(0), rounds=200)
        print("real torch %s: memory_stats(0) %.1f µs" % (torch.__version__, stats_us))
    except Exception as e:  # a CPU-only machine: no driver to ask
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print("real torch %s: memory_stats(0) not callable here: %s" % (torch.__version__, first))
    state = "CUDA initialized" if torch.cuda.is_initialized() else "CUDA not initialized, no device read"
    interval_cost("real torch %s" % torch.__version__, state)


def main():
    if len(sys.argv) > 1:
        mode = sys.argv[1]
        if mode == "real":
            real()
        else:
            stand_in(int(mode))
        return
    for mode in ("1", "8", "real"):
        out = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True)
        sys.stdout.write(out.stdout)
        if out.returncode != 0:
            print("agent cost (%s) failed: %s" % (mode, out.stderr.strip().splitlines()[-1:]))


if __name__ == "__main__":
    main()
