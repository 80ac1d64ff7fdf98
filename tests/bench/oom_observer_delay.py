"""How long an OOM takes to reach the program, with and without the agent's observer.

Needs a Python with CUDA torch and a GPU. Modes (the first argument):
- `plain`: no agent, no memory history;
- `direct`: memory history recorded by the program itself, and three `_snapshot()` calls timed
  (torch's first one in a process is the slow one);
- `agent`: run it under `torchtop run --record-history -- python3 THIS agent`, so that the
  agent's observer writes a snapshot before the error is raised;
- `agent-no-history`: under `torchtop run -- python3 THIS agent-no-history` (observer, no
  snapshot).
Each asks twice for 200 GiB and prints how long each `OutOfMemoryError` took to arrive.
"""

import pickle
import sys
import time

started = time.time()
import torch  # noqa: E402

print("import torch %.2f s" % (time.time() - started))
mode = sys.argv[1]
if mode == "direct":
    torch.cuda.memory._record_memory_history(enabled="all", stacks="python", max_entries=100000)
held = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]
torch.cuda.synchronize()
if mode == "direct":
    for i in range(3):
        t0 = time.perf_counter()
        snapshot = torch.cuda.memory._snapshot()
        t1 = time.perf_counter()
        size = len(pickle.dumps(snapshot, protocol=4))
        print("direct _snapshot() #%d: %.3f s, pickle %.3f s, %d bytes"
              % (i, t1 - t0, time.perf_counter() - t1, size))
for i in range(2):
    t0 = time.perf_counter()
    try:
        torch.empty(200 << 30, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        pass
    print("%s: OOM #%d raised after %.3f s" % (mode, i, time.perf_counter() - t0))
