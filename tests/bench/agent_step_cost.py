"""Training steps per second with and without the torchtop agent, in a real training loop.

Issue 19 asks for this on a GPU: a real model trained with and without the agent, steps/s for
each. The loop is a decoder-only transformer (torch.nn's encoder layers under a causal mask)
trained with AdamW on random tokens: on CUDA at a size that keeps an H100/H200 busy (bf16
autocast), on the CPU at a size that takes a few milliseconds a step, so that the script runs
everywhere and its test (tests/python/test_real_torch.py) runs in CI.

Rounds alternate: without the agent, then with it (started in this process at the default 1 s
interval, `torchtop_agent.step()` after each step, and a monitor in another process reading
every stats line, so that the agent does all its work each interval). Each arm runs a fixed
time between two synchronizations, so that queued GPU work is counted in the arm that queued it.

Printed: each arm's steps/s; the medians and their difference; the agent's own CPU time, which
is its cost without the noise of step rates: its thread's (from /proc/self/task/TID/schedstat),
with that thread's wake-ups, and that of the ticks step() made on the training thread; on CUDA, one `torch.cuda.memory_stats()` call's time; and, after training, the figures of
the agent's last stats line next to `torch.cuda.memory_stats()` read at the same quiet moment
(and next to `torchtop --once --json` when TORCHTOP_BIN names the binary).

Run: python3 tests/bench/agent_step_cost.py [--seconds S] [--rounds N] [--device cuda|cpu]
Needs a Python with torch. Prints only; nothing here is a pass or a fail but a broken run.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "assets", "python"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torchtop_agent  # noqa: E402

# The figures compared after training: the agent's key, and the field torchtop's JSON calls it.
COMPARED = [
    ("allocated_bytes.all.current", "allocated_bytes"),
    ("reserved_bytes.all.current", "reserved_bytes"),
    ("active_bytes.all.current", "active_bytes"),
    ("inactive_split_bytes.all.current", "inactive_split_bytes"),
    ("allocated_bytes.all.peak", "peak_allocated_bytes"),
    ("segment.all.current", "segments"),
    ("num_alloc_retries", "alloc_retries"),
    ("num_ooms", "ooms"),
]

# The monitor: another process that reads every line the agent sends, and keeps the last stats
# line in a file (written whole, then renamed) for the comparison after training.
MONITOR = r'''
import json, os, socket, sys
path, out = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(path)
count = 0
for line in sock.makefile("rb"):
    message = json.loads(line)
    if message.get("type") != "stats":
        continue
    count += 1
    with open(out + ".tmp", "w") as f:
        json.dump({"count": count, "stats": message}, f)
    os.replace(out + ".tmp", out)
'''


class Decoder(nn.Module):
    def __init__(self, vocab, width, layers, heads, sequence):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(sequence, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        length = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device)
        hidden = self.embed(tokens) + self.position[:length]
        return self.head(self.blocks(hidden, mask=mask, is_causal=True))


def shape_for(device):
    if device.type == "cuda":
        return dict(vocab=32000, width=1024, layers=12, heads=16, sequence=1024, batch=16)
    return dict(vocab=1000, width=64, layers=2, heads=4, sequence=32, batch=4)


class Trainer:
    def __init__(self, device):
        self.device = device
        self.shape = shape_for(device)
        s = self.shape
        self.model = Decoder(s["vocab"], s["width"], s["layers"], s["heads"], s["sequence"]).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.tokens = torch.randint(0, s["vocab"], (s["batch"], s["sequence"] + 1), device=device)
        self.loss = nn.CrossEntropyLoss()

    def step(self):
        inputs, targets = self.tokens[:, :-1], self.tokens[:, 1:]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            logits = self.model(inputs)
            loss = self.loss(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, seconds, after_step=None):
        """Steps for `seconds`, synchronized at both ends: (steps, elapsed seconds)."""
        self.sync()
        started = time.perf_counter()
        steps = 0
        while time.perf_counter() - started < seconds:
            self.step()
            if after_step is not None:
                after_step()
            steps += 1
        self.sync()
        return steps, time.perf_counter() - started

    def parameters(self):
        return sum(p.numel() for p in self.model.parameters())


def thread_cpu_and_wakeups(name):
    """CPU time (ns, from its schedstat) and voluntary context switches (its wake-ups) of this
    process's thread called `name`; None if there is none."""
    for thread in threading.enumerate():
        if thread.name == name and thread.native_id is not None:
            task = "/proc/self/task/%d/" % thread.native_id
            try:
                with open(task + "schedstat") as f:
                    cpu = int(f.read().split()[0])
                with open(task + "status") as f:
                    switches = [int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches:")]
                return cpu, switches[0]
            except (OSError, IndexError, ValueError):
                return None
    return None


class AgentCost:
    """What the agent spent in one arm: its thread's CPU and wake-ups, and the CPU of the ticks
    that step() made on the training thread (its thread sleeps while they come)."""

    def __init__(self, thread_ns, wakeups, step_ns):
        self.thread_ns, self.wakeups, self.step_ns = thread_ns, wakeups, step_ns

    def describe(self, seconds):
        return ("agent thread %.3f ms/s (%.1f wake-ups/s), ticks in step() %.3f ms/s"
                % (self.thread_ns / 1e6 / seconds, self.wakeups / seconds, self.step_ns / 1e6 / seconds))


class AgentArm:
    """The agent started, a monitor reading it, until `stop`."""

    def __init__(self, socket_dir, interval_ms, last_stats):
        self.path = torchtop_agent.start(interval_ms=interval_ms, socket_dir=socket_dir)
        if self.path is None:
            raise SystemExit("the agent did not start (torchtop_agent.start returned None)")
        self.last_stats = last_stats
        try:
            os.unlink(last_stats)  # the last arm's monitor counted from 0 too
        except FileNotFoundError:
            pass
        self.monitor = subprocess.Popen([sys.executable, "-c", MONITOR, self.path, last_stats])
        deadline = time.monotonic() + 60
        while not torchtop_agent._agent.clients:
            if time.monotonic() > deadline or self.monitor.poll() is not None:
                raise SystemExit("the monitor did not connect to the agent")
            time.sleep(0.01)
        self.thread_before = thread_cpu_and_wakeups("torchtop-agent")
        self.step_ns_before = torchtop_agent._agent.step_tick_ns

    def stop(self):
        """The agent's cost over the arm, or None when its thread was not found."""
        thread_after = thread_cpu_and_wakeups("torchtop-agent")
        step_ns = torchtop_agent._agent.step_tick_ns - self.step_ns_before
        torchtop_agent.stop()
        self.monitor.wait(timeout=60)
        if self.thread_before is None or thread_after is None:
            return None
        return AgentCost(thread_after[0] - self.thread_before[0], thread_after[1] - self.thread_before[1],
                         step_ns)


def stats_lines_read(last_stats):
    try:
        with open(last_stats) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def time_memory_stats(device):
    torch.cuda.memory_stats(device)
    rounds = 200
    started = time.perf_counter()
    for _ in range(rounds):
        torch.cuda.memory_stats(device)
    return (time.perf_counter() - started) / rounds


def compare_after_training(trainer, socket_dir, interval_ms, last_stats):
    """The agent's next stats line and torchtop's view next to memory_stats(), all while idle."""
    device = trainer.device
    trainer.sync()
    arm = AgentArm(socket_dir, interval_ms, last_stats)
    try:
        before = (stats_lines_read(last_stats) or {}).get("count", 0)
        deadline = time.monotonic() + 30
        while (stats_lines_read(last_stats) or {}).get("count", 0) < before + 2:
            if time.monotonic() > deadline:
                raise SystemExit("no stats line came from the agent within 30 s")
            time.sleep(0.05)
        torchs = torch.cuda.memory_stats(device)
        line = stats_lines_read(last_stats)["stats"]
        ours = next((d for d in line["devices"] if d.get("index") == device.index), None)
        print("allocator figures, idle after training (agent's stats line | torch.cuda.memory_stats()):")
        if ours is None:
            print("  the agent's stats line names no device %s: %s" % (device.index, line["devices"]))
            return
        for key, _ in COMPARED:
            mine, theirs = ours["stats"].get(key), torchs.get(key)
            print("  %-34s %16s %16s  %s" % (key, mine, theirs, "same" if mine == theirs else "DIFFERENT"))
        binary = os.environ.get("TORCHTOP_BIN")
        if binary:
            compare_with_torchtop(binary, socket_dir, device, torchs)
    finally:
        arm.stop()


def compare_with_torchtop(binary, socket_dir, device, torchs):
    env = dict(os.environ, TORCHTOP_AGENT_DIR=socket_dir)
    out = subprocess.run([binary, "--once", "--json"], capture_output=True, text=True, env=env, timeout=120)
    if out.returncode != 0:
        print("torchtop --once --json failed (%d): %s" % (out.returncode, out.stderr.strip()))
        return
    snapshot = json.loads(out.stdout)
    mine = [p for p in snapshot.get("processes", []) if p.get("pid") == os.getpid() and p.get("torch")]
    devices = [d for p in mine for d in p["torch"].get("devices", []) if d.get("index") == device.index]
    print("torchtop --once --json (%s) | torch.cuda.memory_stats():" % binary)
    if not devices:
        print("  torchtop shows no allocator figures for pid %d on device %s" % (os.getpid(), device.index))
        return
    for key, field in COMPARED:
        shown, theirs = devices[0].get(field), torchs.get(key)
        print("  %-34s %16s %16s  %s" % (field, shown, theirs, "same" if shown == theirs else "DIFFERENT"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="each arm's length")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of arms, without then with")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--interval-ms", type=int, default=1000, help="the agent's stats interval")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    trainer = Trainer(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print("device %s (%s), torch %s; model: %d-layer decoder, width %d, sequence %d, batch %d, %.1fM parameters"
          % (device, name, torch.__version__, trainer.shape["layers"], trainer.shape["width"],
             trainer.shape["sequence"], trainer.shape["batch"], trainer.parameters() / 1e6))
    trainer.run(min(args.seconds, 5.0))  # warm-up: kernels chosen, allocator's pools made
    with tempfile.TemporaryDirectory(prefix="torchtop-step-cost-") as socket_dir:
        os.chmod(socket_dir, 0o700)
        last_stats = os.path.join(socket_dir, "last-stats.json")
        rates = {"without": [], "with": []}
        spent_in_all, agent_seconds, lines = AgentCost(0, 0, 0), 0.0, 0
        for round_number in range(1, args.rounds + 1):
            steps, took = trainer.run(args.seconds)
            rates["without"].append(steps / took)
            print("round %d without the agent: %8.3f steps/s (%d steps in %.2f s)"
                  % (round_number, steps / took, steps, took))
            arm = AgentArm(socket_dir, args.interval_ms, last_stats)
            count_before = (stats_lines_read(last_stats) or {}).get("count", 0)
            steps, took = trainer.run(args.seconds, after_step=torchtop_agent.step)
            read = (stats_lines_read(last_stats) or {}).get("count", 0) - count_before
            spent = arm.stop()
            rates["with"].append(steps / took)
            agent_seconds += took
            lines += read
            if spent is not None:
                spent_in_all = AgentCost(spent_in_all.thread_ns + spent.thread_ns,
                                         spent_in_all.wakeups + spent.wakeups, spent_in_all.step_ns + spent.step_ns)
            print("round %d with the agent:    %8.3f steps/s (%d steps in %.2f s), %d stats lines read, %s"
                  % (round_number, steps / took, steps, took, read,
                     spent.describe(took) if spent is not None else "agent thread N/A"))
        without, with_agent = statistics.median(rates["without"]), statistics.median(rates["with"])
        spread = max(rates["without"] + rates["with"]) / min(rates["without"] + rates["with"]) - 1
        print("median steps/s: without %.3f, with %.3f: %+.2f%% (all arms within %.2f%% of each other)"
              % (without, with_agent, (with_agent / without - 1) * 100, spread * 100))
        total_ns = spent_in_all.thread_ns + spent_in_all.step_ns
        print("agent: %s; in all %.3f ms of CPU a second (%.4f%% of a second), %d stats lines in %.1f s"
              % (spent_in_all.describe(agent_seconds), total_ns / 1e6 / agent_seconds,
                 total_ns / 1e7 / agent_seconds, lines, agent_seconds))
        if device.type == "cuda":
            print("torch.cuda.memory_stats(%s): %.1f us a call" % (device, time_memory_stats(device) * 1e6))
            compare_after_training(trainer, socket_dir, args.interval_ms, last_stats)
        else:
            print("torch.cuda.memory_stats(): not timed (no CUDA device); allocator figures: none on the CPU")


if __name__ == "__main__":
    main()
