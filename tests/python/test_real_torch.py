"""The agent under the real torch: a DataLoader with 2 workers, fork and spawn, under the
sitecustomize that `torchtop run` installs, checked from outside by a tiny protocol client.
Also the statistics' path: the agent reads torch's memory_stats_as_nested_dict (never
memory_stats) and sends exactly what torch's own memory_stats flattening gives for its keys; with
no GPU here, only the C++ binding under torch's Python is stood in for.

The interpreter with torch comes from $TORCHTOP_TEST_TORCH_PYTHON, else the virtual environment
that .ci/torch-cpu-libtorch.sh makes (target/torch-ci/venv/bin/python). Without one that can
`import torch`, the test is skipped and says so; under CI (`CI` set, as .ci/run sets it) it fails
instead, as the Rust tests do (tests/common/ci.rs), so that CI never passes a test it did not run.
"""

import json
import os
import subprocess
import sys
import unittest

from agent_testlib import AGENT_DIR, ROOT, TempDirMixin, clean_env, sockets_in

TORCH_PYTHON_ENV = "TORCHTOP_TEST_TORCH_PYTHON"

PROGRAM = r'''
import json, os, socket, sys, time

import torch
from torch.utils.data import DataLoader, Dataset


class Numbers(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        agent = sys.modules.get("torchtop_agent")
        has_agent = agent is not None and agent.socket_path() is not None
        return torch.tensor([i, os.getpid(), int(has_agent)])


class Client:
    """Protocol v1 (assets/agent-protocol.md): JSON objects, one per line, each way."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(path)
        self.buf = b""
        self.next_id = 0

    def read(self):
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError("the agent closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def command(self, cmd, **extra):
        self.next_id += 1
        message = dict({"v": 1, "type": "cmd", "id": self.next_id, "cmd": cmd}, **extra)
        self.sock.sendall((json.dumps(message) + "\n").encode())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reply = self.read()
            if reply["type"] == "reply" and reply["id"] == self.next_id:
                return reply
        raise RuntimeError("no reply to %s within 30 s" % cmd)


def main():
    import torchtop_agent  # already started by the sitecustomize

    directory = os.environ["TORCHTOP_AGENT_DIR"]
    client = Client(torchtop_agent.socket_path())
    hello = client.read()
    out = {"main_pid": os.getpid(), "torch": hello["torch"], "runs": []}
    for context in ("fork", "spawn"):
        for persistent in (False, True):
            loader = DataLoader(Numbers(), batch_size=4, num_workers=2,
                                multiprocessing_context=context, persistent_workers=persistent)
            for epoch in range(2):
                batches = iter(loader)
                rows = [next(batches)]  # the workers are up, and alive until the epoch ends
                replies = [client.command("snapshot"), client.command("set_interval", ms=200)]
                sockets = sorted(n for n in os.listdir(directory) if n.endswith(".sock"))
                rows += list(batches)
                replies.append(client.command("reset_peak"))  # after the epoch's workers
                table = torch.cat(rows).tolist()
                out["runs"].append({
                    "context": context, "persistent": persistent, "epoch": epoch,
                    "replies": [[r["cmd"], r["ok"], r.get("error")] for r in replies],
                    "sockets_mid_epoch": sockets,
                    "items": sorted(r[0] for r in table),
                    "worker_pids": sorted({r[1] for r in table}),
                    "workers_with_agent": sum(r[2] for r in table),
                })
            del loader
    print(json.dumps(out))



if __name__ == "__main__":
    main()
'''


def torch_python():
    """(interpreter, None), or (None, why not)."""
    explicit = os.environ.get(TORCH_PYTHON_ENV)
    candidate = explicit or os.path.join(ROOT, "target", "torch-ci", "venv", "bin", "python")
    if not os.access(candidate, os.X_OK):
        return None, "no interpreter at %s (set %s to a python that has torch)" % (candidate, TORCH_PYTHON_ENV)
    try:
        out = subprocess.run([candidate, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, timeout=600, env=clean_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "%s did not run: %s" % (candidate, e)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return None, "%s cannot import torch (%s); set %s to a python that can" % (
            candidate, last, TORCH_PYTHON_ENV)
    return candidate, None


HISTORY_PROGRAM = r'''
import inspect, json, os, socket, sys

import torchtop_agent  # started by the sitecustomize, before torch is imported
import torch

out = {"initialized_after_import": torch.cuda.is_initialized()}
ours = [c for c, _ in torch.cuda._queued_calls if "apply_deferred" in getattr(c, "__name__", "")]
out["queued_by_the_import_hook"] = len(ours)
try:
    inspect.signature(torch.cuda.memory._record_memory_history).bind(
        "all", context="all", stacks="python", max_entries=100000)
    out["signature_fits"] = True
except TypeError as e:
    out["signature_fits"] = str(e)
out["has_oom_observer_hook"] = hasattr(torch._C, "_cuda_attach_out_of_memory_observer")

sock = socket.socket(socket.AF_UNIX)
sock.connect(torchtop_agent.socket_path())
sock.sendall(b'{"v":1,"type":"cmd","id":1,"cmd":"record_history"}\n')
buf = b""
while True:
    line, _, buf = buf.partition(b"\n") if b"\n" in buf else (None, None, buf)
    if line is None:
        buf += sock.recv(65536)
        continue
    msg = json.loads(line)
    if msg["type"] == "reply":
        out["reply"] = msg
        break
out["initialized_after_command"] = torch.cuda.is_initialized()
try:
    torch.cuda.init()  # no GPU here: the program's own error, not one of the agent's
    out["init"] = "ok"
except Exception as e:
    out["init"] = "%s: %s" % (type(e).__name__, str(e)[:90])
print(json.dumps(out))
'''


STATS_PROGRAM = r'''
import json, os, sys

sys.path.insert(0, os.environ["AGENT_DIR"])
import torch
import torchtop_agent

# No GPU here: stand in for the C++ binding only, so that torch's own Python runs around it.
counter = iter(range(1000, 100000))


def binding(index):
    def counters():
        return {m: next(counter) for m in ("current", "peak", "allocated", "freed")}

    out = {k: next(counter) for k in ("num_alloc_retries", "num_ooms", "max_split_size",
                                      "num_sync_all_streams", "num_device_alloc", "num_device_free")}
    for family in ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
                   "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"):
        out[family] = {pool: counters() for pool in ("all", "small_pool", "large_pool")}
    out["oversize_allocations"] = counters()
    out["oversize_segments"] = counters()
    binding.last[index] = out
    return out


binding.last = {}
torch._C._cuda_memoryStats = binding
torch.cuda._initialized = True
torch.cuda.device_count = lambda: 2
flat_calls = []
real_flat = torch.cuda.memory_stats
torch.cuda.memory_stats = lambda device=None: flat_calls.append(device) or real_flat(device)

agent = torchtop_agent._Agent(os.path.join(os.environ["TMP"], "x.sock"), 1000)
devices = agent._stats()["devices"]
# What real memory_stats makes of the same nested dicts, flattened by torch's own code.
torch._C._cuda_memoryStats = lambda index: binding.last[index]
expected = {d["index"]: {k: real_flat(d["index"])[k] for k in torchtop_agent.SENT_STATS} for d in devices}
agent.close_all(False)
print(json.dumps({"devices": devices, "expected": expected, "flat_calls": flat_calls,
                  "keys": len(real_flat(0)), "has_nested": hasattr(torch.cuda, "memory_stats_as_nested_dict")}))
'''


class RealTorchTests(TempDirMixin, unittest.TestCase):
    def setUp(self):
        self.python, why = torch_python()
        if self.python is None:
            if os.environ.get("CI"):
                self.fail("CI is set, so the real-torch tests may not skip: %s" % why)
            print("\nskipped: the real-torch tests: %s" % why, file=sys.stderr)
            self.skipTest(why)
        self.make_tmp()

    def test_dataloader_workers_under_the_agent(self):
        program = os.path.join(self.tmp, "train.py")  # spawn workers re-import the main module
        with open(program, "w") as f:
            f.write(PROGRAM)
        out = subprocess.run([self.python, program], env=clean_env(self.site_env()),
                             capture_output=True, text=True, timeout=900, cwd=self.tmp)
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        main_pid = result["main_pid"]
        self.assertTrue(result["torch"].startswith("2."), result["torch"])
        self.assertEqual(len(result["runs"]), 8)
        for run in result["runs"]:
            with self.subTest(context=run["context"], persistent=run["persistent"], epoch=run["epoch"]):
                # Every command is answered while the workers live and after they are gone.
                self.assertEqual([r[0] for r in run["replies"]], ["snapshot", "set_interval", "reset_peak"])
                snapshot, interval, reset = run["replies"]
                self.assertEqual(snapshot[1:], [False, "CUDA is not initialized in this process"])
                self.assertEqual(interval[1:], [True, None])
                self.assertFalse(reset[1])
                self.assertEqual(run["items"], list(range(16)))
                self.assertEqual(len(run["worker_pids"]), 2)
                self.assertNotIn(main_pid, run["worker_pids"])
                self.assertEqual(run["workers_with_agent"], 0, "a worker served an agent")
                self.assertEqual(run["sockets_mid_epoch"], ["%d.sock" % main_pid],
                                 "only the main program has a socket")
        self.assertEqual(sockets_in(self.dir), [], "sockets left behind")
        print("\nreal torch %s: 8 DataLoader epochs (fork and spawn, 2 workers), every command answered"
              % result["torch"], file=sys.stderr)


    def test_stats_come_from_the_nested_dict_with_memory_stats_own_figures(self):
        program = os.path.join(self.tmp, "stats.py")
        with open(program, "w") as f:
            f.write(STATS_PROGRAM)
        env = clean_env({"AGENT_DIR": AGENT_DIR, "TMP": self.tmp})
        out = subprocess.run([self.python, program], env=env, capture_output=True, text=True,
                             timeout=600, cwd=self.tmp)
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        self.assertTrue(result["has_nested"], "this torch has no torch.cuda.memory_stats_as_nested_dict")
        self.assertEqual(result["keys"], 122, "torch's memory_stats flattens the nested dict")
        self.assertEqual(result["flat_calls"], [], "the agent called memory_stats")
        self.assertEqual([d["index"] for d in result["devices"]], [0, 1])
        for device in result["devices"]:
            self.assertEqual(device["stats"], result["expected"][str(device["index"])])


    def test_record_history_waits_for_cuda_and_fits_this_torch(self):
        program = os.path.join(self.tmp, "history.py")
        with open(program, "w") as f:
            f.write(HISTORY_PROGRAM)
        env = clean_env(dict(self.site_env(), TORCHTOP_RECORD_HISTORY="all"))
        out = subprocess.run([self.python, program], env=env, capture_output=True, text=True,
                             timeout=600, cwd=self.tmp)
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        self.assertTrue(result["signature_fits"], result)
        self.assertTrue(result["has_oom_observer_hook"])
        self.assertFalse(result["initialized_after_import"], "the agent initialized CUDA")
        self.assertFalse(result["initialized_after_command"], "the agent initialized CUDA")
        self.assertEqual(result["queued_by_the_import_hook"], 1)
        reply = result["reply"]
        self.assertTrue(reply["ok"], reply)
        self.assertEqual((reply["recording"], reply["pending"]), (False, True))
        print("\nreal torch: record_history is pending until CUDA is initialized (%s); the "
              "program's own torch.cuda.init() gave %s" % (reply, result["init"]), file=sys.stderr)

    def test_the_step_cost_benchmark_trains_with_and_without_the_agent(self):
        """tests/bench/agent_step_cost.py, the GPU figure's script, runs on the CPU: both arms
        train, and the monitor reads the agent's stats lines in the arm with it."""
        script = os.path.join(ROOT, "tests", "bench", "agent_step_cost.py")
        out = subprocess.run([self.python, script, "--seconds", "0.5", "--rounds", "1", "--device", "cpu",
                              "--interval-ms", "50"],
                             env=clean_env(), capture_output=True, text=True, timeout=900, cwd=self.tmp)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        without = [l for l in lines if l.startswith("round 1 without the agent:")]
        with_agent = [l for l in lines if l.startswith("round 1 with the agent:")]
        self.assertEqual((len(without), len(with_agent)), (1, 1), out.stdout)
        for line in without + with_agent:
            steps = int(line.split("(")[1].split()[0])
            self.assertGreater(steps, 0, line)
        read = int(with_agent[0].split("), ")[1].split()[0])
        self.assertGreater(read, 0, "the monitor read no stats line: %s" % with_agent[0])
        self.assertIn("agent thread", with_agent[0])
        self.assertIn("ticks in step()", with_agent[0])
        self.assertNotIn("N/A", with_agent[0], "the agent's thread was not found")
        self.assertTrue(any(l.startswith("median steps/s:") for l in lines), out.stdout)


if __name__ == "__main__":
    unittest.main()
