"""The `S` key's path on real CUDA, spoken straight to the agent: a model trains under
`torchtop run` (it prints its steps each second), and after 15 s a client asks its agent to
record memory history until the next snapshot, then for two snapshots, and opens the first with
`torchtop snapshot --json`. Shows what a snapshot costs a training process, and what it holds.

Run from the repository root on a machine with a GPU: python3 tests/bench/on_a_gpu_snapshot_command.py
(target/release/torchtop must be built). Prints only.
"""

import json, os, socket, subprocess, sys, time
TRAIN = r'''
import sys, time
sys.path.insert(0, "tests/bench")
from agent_step_cost import Trainer
import torch
trainer = Trainer(torch.device("cuda"))
end = time.monotonic() + 45
second, steps = time.monotonic() + 1, 0
while time.monotonic() < end:
    trainer.step(); steps += 1
    if time.monotonic() >= second:
        trainer.sync(); print("t=%.0f steps %d" % (time.time() % 1000, steps), flush=True); steps = 0; second += 1
'''
d = "/tmp/ag2"; os.makedirs(d, mode=0o700, exist_ok=True)
env = dict(os.environ, TORCHTOP_AGENT_DIR=d, PYTHONUNBUFFERED="1")
p = subprocess.Popen(["target/release/torchtop", "run", "--", sys.executable, "-c", TRAIN], env=env)
path = os.path.join(d, "%d.sock" % p.pid)
deadline = time.time() + 60
while not os.path.exists(path) and time.time() < deadline: time.sleep(0.2)
time.sleep(15)
s = socket.socket(socket.AF_UNIX); s.connect(path); f = s.makefile("rwb")
def cmd(i, **kw):
    t = time.time()
    f.write((json.dumps(dict(v=1, type="cmd", id=i, **kw)) + "\n").encode()); f.flush()
    while True:
        m = json.loads(f.readline())
        if m.get("type") == "reply" and m.get("id") == i:
            print("t=%.0f reply after %.3f s: %s" % (time.time() % 1000, time.time() - t, json.dumps(m)[:300]), flush=True)
            return m
cmd(1, cmd="record_history", enabled="all", max_entries=100000, stacks="python", context="all", until_snapshot=True)
time.sleep(2)
r = cmd(2, cmd="snapshot")
time.sleep(3)
r2 = cmd(3, cmd="snapshot")
if r.get("ok"):
    out = subprocess.run(["target/release/torchtop", "snapshot", r["path"], "--json"], capture_output=True, text=True)
    doc = json.loads(out.stdout)
    print("snapshot: totals", doc["totals"], "stacks_recorded", doc["stacks_recorded"], "top", json.dumps(doc["top_stacks"][:2])[:600])
p.wait()
