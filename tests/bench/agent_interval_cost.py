"""What the agent costs the training process per stats interval, as a share of the default 1 s.

Each interval the agent's thread builds its hello (sent again only when it changed), reads the
allocator's statistics of each device the program may use, and JSON-encodes one stats line for
its monitors. This times exactly that work (`_hello`, `_stats`, one encoding), without a socket:

- with the stand-in torch (tests/python/fake_torch), whose statistics take real torch's path:
  `memory_stats_as_nested_dict` builds the nested dict (in Python here, in C++ in torch) and
  `memory_stats` flattens it in Python. With 1 and 8 devices in use, and with 8 devices visible
  but 1 in use (a torchrun rank on an 8-GPU box);
- with the real torch of the Python running this script, if it has one. On a CPU-only machine
  CUDA is never initialized, so the agent reads no device. So that real torch's own Python code
  (memory_stats' flattening, the nested function, is_initialized) is timed anyway, the C++
  binding it ends in, `torch._C._cuda_memoryStats`, is then replaced by a Python function that
  builds a fresh nested dict of the real shape (122 values), and CUDA is marked initialized.
  That function costs more than the C++ one, so these figures are an upper bound.

Run: python3 tests/bench/agent_interval_cost.py  (the overhead benchmark runs it; prints only).
`python3 tests/bench/agent_interval_cost.py MODE` runs one mode: 1, 8, 1/8, real, real-binding.
`TORCHTOP_BENCH_AGENT_DIR=DIR` times the torchtop_agent.py in DIR instead of assets/python (an
older agent, for a before/after comparison in one run).
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
MIB = 1 << 20
AGENT_DIR = os.environ.get("TORCHTOP_BENCH_AGENT_DIR") or os.path.join(ROOT, "assets", "python")


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


def devices_in_use(count):
    return "1 device in use" if count == 1 else "%d devices in use" % count


def encoder(agent_module):
    """The agent's own encoding when it has one (this branch), else what older agents did."""
    encode = getattr(agent_module, "_encode", None)
    if encode is not None:
        return encode
    return lambda message: (json.dumps(message, separators=(",", ":"), default=str) + "\n").encode()


def interval_cost(label, devices_note, after_each=None):
    import torchtop_agent

    agent = torchtop_agent._Agent(os.path.join("/tmp", "torchtop-bench-%d.sock" % os.getpid()), 1000)
    encode = encoder(torchtop_agent)
    sizes = []

    def one_interval():
        agent._hello()
        sizes.append(len(encode(agent._stats())))
        if after_each is not None:
            after_each()
        del sizes[:-1]

    us = per_call_us(one_interval)
    print("agent, %s (%s): %.0f µs per interval = %.4f %% of a 1 s interval; stats line %d bytes"
          % (label, devices_note, us, us / (INTERVAL_S * 1e6) * 100, sizes[-1]))


def stand_in(mode):
    sys.path[:0] = [AGENT_DIR, os.path.join(ROOT, "tests", "python", "fake_torch")]
    import torch

    used, _, visible = mode.partition("/")
    used, visible = int(used), int(visible or used)
    torch.cuda._device_count = visible
    torch.cuda._fake_init(tuple(range(used)))
    calls = torch.cuda._calls
    if mode == "1":
        flat_us = per_call_us(lambda: (torch.cuda.memory_stats(0), calls.clear()))
        nested_us = per_call_us(lambda: (torch.cuda.memory_stats_as_nested_dict(0), calls.clear()))
        print("stand-in torch: memory_stats(0) %.1f µs (%d keys), memory_stats_as_nested_dict(0) %.1f µs"
              % (flat_us, len(torch.cuda.memory_stats(0)), nested_us))
    note = devices_in_use(used) if used == visible else "%d devices visible, %d in use" % (visible, used)
    interval_cost("stand-in torch", note, calls.clear)


def import_real_torch():
    sys.path[:0] = [AGENT_DIR]
    try:
        import torch
    except ImportError:
        print("real torch: not installed in %s (TORCHTOP_BENCH_PYTHON names one that has it)" % sys.executable)
        return None
    return torch


def real():
    torch = import_real_torch()
    if torch is None:
        return
    try:
        stats_us = per_call_us(lambda: torch.cuda.memory_stats(0), rounds=200)
        print("real torch %s: memory_stats(0) %.1f µs" % (torch.__version__, stats_us))
    except Exception as e:  # a CPU-only machine: no driver to ask
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print("real torch %s: memory_stats(0) not callable here: %s" % (torch.__version__, first))
    state = "CUDA initialized" if torch.cuda.is_initialized() else "CUDA not initialized, no device read"
    interval_cost("real torch %s" % torch.__version__, state)


def nested_like_torch(index):
    """A fresh nested dict of the shape torch._C._cuda_memoryStats returns, device in use."""
    base = (index + 1) * 100 * MIB

    def counters(value):
        return {"current": value, "peak": value, "allocated": value, "freed": 0}

    out = {"num_alloc_retries": 0, "num_ooms": 0, "max_split_size": -1, "num_sync_all_streams": 0,
           "num_device_alloc": 3, "num_device_free": 0}
    for family in ("allocation", "segment", "active", "inactive_split"):
        out[family] = {pool: counters(3) for pool in ("all", "small_pool", "large_pool")}
    for family in ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes",
                   "requested_bytes"):
        out[family] = {pool: counters(base) for pool in ("all", "small_pool", "large_pool")}
    out["oversize_allocations"] = counters(0)
    out["oversize_segments"] = counters(0)
    return out


def real_binding():
    torch = import_real_torch()
    if torch is None:
        return
    cuda = torch.cuda
    binding = "_cuda_memoryStats"
    if not hasattr(torch._C, binding) or not hasattr(cuda, "memory_stats_as_nested_dict"):
        print("real torch %s: no torch._C.%s to stand in for; skipped" % (torch.__version__, binding))
        return
    if cuda.is_initialized():
        print("real torch %s: CUDA is initialized here; the 'real' line measured it" % torch.__version__)
        return
    # memory_stats and memory_stats_as_nested_dict look the binding up as torch._C's attribute.
    setattr(torch._C, binding, nested_like_torch)
    cuda._initialized = True
    version = "real torch %s" % torch.__version__
    binding_us = per_call_us(lambda: nested_like_torch(0))
    flat_us = per_call_us(lambda: cuda.memory_stats(0))
    nested_us = per_call_us(lambda: cuda.memory_stats_as_nested_dict(0))
    print("%s, its C binding %s replaced by a Python function building a fresh 122-value dict "
          "(%.1f µs): memory_stats(0) %.1f µs (%d keys), memory_stats_as_nested_dict(0) %.1f µs"
          % (version, binding, binding_us, flat_us, len(cuda.memory_stats(0)), nested_us))
    for devices in (1, 8):
        cuda.device_count = lambda devices=devices: devices
        interval_cost("%s, binding replaced" % version, devices_in_use(devices))


def main():
    if len(sys.argv) > 1:
        mode = sys.argv[1]
        if mode == "real":
            real()
        elif mode == "real-binding":
            real_binding()
        else:
            stand_in(mode)
        return
    for mode in ("1", "8", "1/8", "real", "real-binding"):
        out = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True)
        sys.stdout.write(out.stdout)
        if out.returncode != 0:
            print("agent cost (%s) failed: %s" % (mode, out.stderr.strip().splitlines()[-1:]))


if __name__ == "__main__":
    main()
