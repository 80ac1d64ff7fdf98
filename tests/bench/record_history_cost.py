"""What memory history recording costs, measured with the stand-in torch (no GPU needed):

1. a training step of ALLOCS allocations, without the agent, with the agent, and with the agent
   recording history as `S` and `torchtop run --record-history` ask (enabled="all",
   stacks="python", max_entries=100000). The stand-in captures each allocation's Python stack
   the way torch does for stacks="python" (a walk of the frames, kept unsymbolized), but in
   Python, where torch does it in C++: the figure is the shape of the cost, not torch's.
2. what the agent's OOM snapshot costs the training thread: pickling a snapshot of 100,000
   trace entries of real shape (frames shared, as torch returns them) into a 0600 file.

Run: python3 tests/bench/record_history_cost.py   (not part of the tests: it only prints)
"""

import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "assets", "python"), os.path.join(ROOT, "tests", "python", "fake_torch")]

import torch  # noqa: E402  (the stand-in)
import torchtop_agent  # noqa: E402

ALLOCS = 1000  # allocations per step, a mid-sized model's forward and backward
STEPS = 200
ROUNDS = 5
DEPTH = 20  # Python frames under each allocation (model, modules, autograd, training loop)


def nested(depth, fn):
    if depth == 0:
        return fn()
    return nested(depth - 1, fn)


def one_step():
    malloc = torch.cuda._fake_malloc
    for _ in range(ALLOCS):
        malloc(0, 1 << 20)


def step_seconds():
    """The median over ROUNDS of the mean step time of STEPS steps."""
    means = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(STEPS):
            nested(DEPTH, one_step)
            torchtop_agent.step()
        means.append((time.perf_counter() - start) / STEPS)
    return statistics.median(means)


def main():
    torch.cuda._fake_init((0,))
    directory = tempfile.mkdtemp(prefix="tt-bench-")
    os.rmdir(directory)
    baseline = step_seconds()
    torchtop_agent.start(interval_ms=1000, socket_dir=directory)
    agent = torchtop_agent._agent
    with_agent = step_seconds()
    agent.history.want(torchtop_agent._history_settings({}), torch)
    recording = step_seconds()
    print("step of %d allocations, %d Python frames deep (stand-in torch, Python %s):"
          % (ALLOCS, DEPTH, sys.version.split()[0]))
    print("  without the agent        %8.3f ms" % (baseline * 1e3))
    print("  with the agent           %8.3f ms  (%+.1f %%)" % (with_agent * 1e3, 100 * (with_agent / baseline - 1)))
    print("  agent recording history  %8.3f ms  (%+.1f %%, %.2f us an allocation)"
          % (recording * 1e3, 100 * (recording / baseline - 1), (recording - with_agent) / ALLOCS * 1e6))

    frames = [{"filename": "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
               "line": 1700 + i, "name": "_call_impl_%d" % i} for i in range(DEPTH)]
    traces = [{"action": "alloc" if i % 2 == 0 else "free_completed", "addr": 1 << 40 | i * 512,
               "size": 1 << 20, "stream": 0, "time_us": i, "frames": frames,
               "compile_context": "N/A", "user_metadata": ""} for i in range(100000)]
    snapshot = {"segments": [], "device_traces": [traces],
                "allocator_settings": {"expandable_segments": False}, "external_annotations": []}
    times = []
    for _ in range(3):
        start = time.perf_counter()
        path, size = agent._dump("oom", snapshot)
        times.append(time.perf_counter() - start)
        os.unlink(path)
    print("OOM snapshot of 100,000 trace entries: %.0f ms on the training thread, %.1f MB file"
          % (statistics.median(times) * 1e3, size / 1e6))
    torchtop_agent.stop()


if __name__ == "__main__":
    main()
