#!/usr/bin/env bash
# What only a machine with an NVIDIA GPU and CUDA torch can show, in one run of about 4 minutes:
# torchtop's readings next to nvidia-smi's, `torchtop attach` into a training process, an OOM
# under `torchtop run --record-history` and its snapshot, the TUI's frames, a recording, the
# exporter's page, the agent's interval cost with CUDA, and steps/s with and without the agent
# (tests/bench/agent_step_cost.py). Prints a log; everything it wrote goes into
# $OUT/bundle.tar.gz. Nothing in the tests depends on it: it is for the README's figures.
#
# Run from the repository root: OUT=/tmp/out bash tests/bench/on_a_gpu.sh
# (TORCHTOP_BIN: the binary, default target/release/torchtop; PYTHON: a python with CUDA torch.)
set -u
OUT=${OUT:-/tmp/torchtop-gpu-out}
BIN=$(realpath "${TORCHTOP_BIN:-target/release/torchtop}")
PYTHON=${PYTHON:-python3}
ROOT=$(pwd)
WORK=$(mktemp -d /tmp/torchtop-gpu.XXXXXX)
export PYTHONUNBUFFERED=1 TORCHTOP_AGENT_DIR=$WORK/agents
mkdir -p "$OUT" "$TORCHTOP_AGENT_DIR" && chmod 700 "$TORCHTOP_AGENT_DIR"
step() { echo; echo "== $(date +%T) $*"; }
gpu_csv() {
    nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,pstate --format=csv
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
}

# Runs a command and prints its wall time, its CPU (user + system) per second, and its peak RSS.
cpu_of() {
    "$PYTHON" - "$@" <<'EOF'
import resource, subprocess, sys, time
started = time.monotonic()
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
wall = time.monotonic() - started
use = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%s: rc %d, %.2f ms of CPU a second over %.1f s (user %.3f s, system %.3f s), peak RSS %.1f MiB"
      % (" ".join(a.rsplit("/", 1)[-1] for a in sys.argv[1:4]), code, (use.ru_utime + use.ru_stime) * 1000 / wall,
         wall, use.ru_utime, use.ru_stime, use.ru_maxrss / 1024))
EOF
}

step "the machine"
uname -r; nproc; "$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())'
if [ -z "${TORCHTOP_NVML_LIB:-}" ] && ! ldconfig -p | grep -q "libnvidia-ml.so.1 "; then
    TORCHTOP_NVML_LIB=$(find /usr /lib /lib64 /opt -name libnvidia-ml.so.1 2>/dev/null | head -1)
    export TORCHTOP_NVML_LIB
    echo "libnvidia-ml.so.1 is not in ldconfig's cache; using $TORCHTOP_NVML_LIB"
fi
nvidia-smi -q > "$WORK/nvidia-smi-q.txt" 2>&1; head -30 "$WORK/nvidia-smi-q.txt"

step "idle: nvidia-smi, then torchtop --once --json and --once"
gpu_csv
timeout 60 "$BIN" --once --json > "$WORK/once-idle.json"; echo "rc=$?"
timeout 60 "$BIN" --once; echo "rc=$?"
"$PYTHON" - "$BIN" <<'EOF'
import statistics, subprocess, sys, time
times = []
for _ in range(9):
    started = time.perf_counter()
    subprocess.run([sys.argv[1], "--once", "--json"], stdout=subprocess.DEVNULL, check=True, timeout=60)
    times.append(time.perf_counter() - started)
print("--once --json: median %.1f ms of 9 runs (min %.1f, max %.1f)"
      % (statistics.median(times) * 1e3, min(times) * 1e3, max(times) * 1e3))
EOF
step "idle GPU: torchtop record -d 1 for 15 s, its cost"
cpu_of "$BIN" record -o "$WORK/idle.ttrec" --duration 15s

# A training process started without the agent (for attach), and a program that runs out of
# memory under `torchtop run --record-history` and then stays, so that its report can be read.
cat > "$WORK/train.py" <<'EOF'
import sys, time
sys.path.insert(0, sys.argv[2])
from agent_step_cost import Trainer
import torch
trainer = Trainer(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
end = time.monotonic() + float(sys.argv[1])
steps = 0
while time.monotonic() < end:
    trainer.step(); steps += 1
trainer.sync()
print("train.py: %d steps" % steps)
EOF
cat > "$WORK/oom.py" <<'EOF'
import sys, time, torch
held = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]
def too_big():
    return torch.empty(200 << 30, dtype=torch.uint8, device="cuda")
try:
    too_big()
except torch.OutOfMemoryError as error:
    print("oom.py caught:", str(error).splitlines()[0][:200])
time.sleep(float(sys.argv[1]))
EOF
step "start train.py (plain) and oom.py (torchtop run --record-history)"
"$PYTHON" "$WORK/train.py" 100 "$ROOT/tests/bench" > "$WORK/train.log" 2>&1 &
TRAIN=$!
"$BIN" run --record-history -- "$PYTHON" "$WORK/oom.py" 90 > "$WORK/oom.log" 2>&1 &
OOM=$!
sleep 20
cat "$WORK/oom.log"; ls -la "$TORCHTOP_AGENT_DIR"

step "torchtop attach $TRAIN"
timeout 60 "$BIN" attach "$TRAIN"; echo "rc=$?"

step "record (20 s) and serve in the background"
cpu_of "$BIN" record -o "$WORK/train.ttrec" --duration 20s > "$WORK/record.cost" 2> "$WORK/record.err" &
RECORD=$!
"$BIN" serve --listen 127.0.0.1:9477 2> "$WORK/serve.err" &
SERVE=$!
sleep 4

step "training: nvidia-smi, torchtop --once --json, nvidia-smi"
gpu_csv
timeout 60 "$BIN" --once --json > "$WORK/once-train.json"; echo "rc=$?"
gpu_csv
timeout 60 "$BIN" --once; echo "rc=$?"
"$PYTHON" - "$WORK/once-train.json" <<'EOF'
import json, sys
snap = json.load(open(sys.argv[1]))
for gpu in snap.get("gpus", []):
    print("gpu", {k: gpu.get(k) for k in ("index", "name", "memory_used_bytes", "memory_total_bytes",
          "utilization_percent", "temperature_c", "power_w", "power_limit_w", "sm_clock_mhz",
          "memory_clock_mhz", "performance_state", "throttle_reasons", "energy_millijoules")})
for proc in snap.get("processes", []):
    torch = proc.get("torch") or {}
    print("process", proc.get("pid"), (proc.get("command") or "")[:60], "gpu_memory", proc.get("gpu_memory_bytes"),
          "torch", [(d.get("index"), d.get("allocated_bytes"), d.get("reserved_bytes"), d.get("ooms"))
                    for d in torch.get("devices", [])])
print("ooms", json.dumps(snap.get("ooms"))[:600])
print("warnings", json.dumps(snap.get("warnings"))[:1500])
EOF

step "the TUI in a pseudo-terminal: 120x40 and 200x55, 6 s each"
for size in 40x120 55x200; do
    "$PYTHON" - "$BIN" "${size%x*}" "${size#*x}" "$WORK/tui-$size.raw" <<'EOF'
import fcntl, os, pty, select, struct, sys, termios, time
binary, rows, cols, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
pid, fd = pty.fork()
if pid == 0:
    os.environ["TERM"] = "xterm-256color"
    os.execv(binary, [binary])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
data, end, quit_sent = b"", time.monotonic() + 8, False
while time.monotonic() < end:
    if not quit_sent and time.monotonic() > end - 2:
        os.write(fd, b"q"); quit_sent = True
    if select.select([fd], [], [], 0.1)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
open(out, "wb").write(data)
_, status = os.waitpid(pid, 0)
print("tui %dx%d: %d bytes, exit status %d" % (cols, rows, len(data), os.waitstatus_to_exitcode(status)))
EOF
done

step "the exporter's page"
"$PYTHON" -c 'import urllib.request, sys; open(sys.argv[1], "wb").write(urllib.request.urlopen("http://127.0.0.1:9477/metrics", timeout=20).read())' "$WORK/metrics.txt"; echo "rc=$?"
grep -E '^(DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_POWER_USAGE|torchtop_torch_allocated_bytes|torchtop_torch_ooms)' "$WORK/metrics.txt" | cut -c1-240 | head -20
kill "$SERVE"; wait "$RECORD"; echo "record rc=$?"; cat "$WORK/record.err" "$WORK/record.cost"

step "the OOM snapshot"
for f in "$TORCHTOP_AGENT_DIR"/*-oom-*.pickle; do
    [ -e "$f" ] || { echo "no OOM snapshot in $TORCHTOP_AGENT_DIR"; break; }
    ls -la "$f"; cp "$f" "$WORK/oom.pickle"
    timeout 60 "$BIN" snapshot "$f" --json > "$WORK/oom-snapshot.json"; echo "rc=$?"
    head -c 1500 "$WORK/oom-snapshot.json"; echo
done
kill "$TRAIN" "$OOM" 2>/dev/null; wait "$TRAIN" "$OOM" 2>/dev/null
cat "$WORK/train.log" "$WORK/oom.log"

step "the agent's interval work with CUDA initialized (agent_interval_cost real)"
timeout 120 "$PYTHON" -c '
import sys, torch
held = [torch.empty(1 << 20, device="cuda") for _ in range(64)]
sys.path.insert(0, "tests/bench")
import agent_interval_cost
agent_interval_cost.real()
'; echo "rc=$?"

step "steps/s with and without the agent (agent_step_cost.py, 3 rounds of 10 s)"
TORCHTOP_BIN=$BIN timeout 240 "$PYTHON" tests/bench/agent_step_cost.py --seconds 10 --rounds 3; echo "rc=$?"

step "bundle"
rm -rf "$TORCHTOP_AGENT_DIR"
tar czf "$OUT/bundle.tar.gz" -C "$WORK" . && ls -la "$OUT"
