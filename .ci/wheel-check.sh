#!/usr/bin/env bash
# CI: build the pip package (assets/python/pyproject.toml: the torchtop binary and the
# torchtop_agent module) as a manylinux2014 wheel with maturin + zig, check that it needs
# nothing newer than glibc 2.17 and no NVIDIA library, install it into a fresh venv and run it
# there against the fake NVML: --version, --once, and `torchtop run` with the stand-in torch
# while `--once --json` sees the allocator.
#
# The host wheel is built with cargo's dev profile by default (2.5 min from nothing on 2 cores,
# 10 s when nothing changed; a release wheel takes 5 min): zig links it against glibc 2.17 all
# the same, and the checks below read the linked binary. Release wheels, as published:
# TORCHTOP_WHEEL_PROFILE=release.
#
# Environment: TORCHTOP_WHEEL_PROFILE (cargo profile, default dev), TORCHTOP_WHEEL_AARCH64=1
# (also build and check the aarch64 wheel, with `--target`; it is not run here).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/target/wheel-ci
profile=${TORCHTOP_WHEEL_PROFILE:-dev}

fail() {
  echo "!!! wheel check FAILED: $*" >&2
  exit 1
}

echo "== wheel: tools (maturin, zig, auditwheel) from PyPI"
if ! "$work/tools/bin/python" -c 'import maturin, ziglang, auditwheel' 2>/dev/null; then
  rm -rf "$work/tools"
  python3 -m venv "$work/tools"
  "$work/tools/bin/pip" install -q "maturin==1.16.0" "ziglang==0.17.1" "auditwheel==6.8.2" ||
    fail "could not install maturin, ziglang and auditwheel from PyPI"
fi
export PATH=$work/tools/bin:$PATH

# Builds the wheel for one target (`host`, or a target triple) into $work/dist/<target> and
# checks its tag, its glibc symbol versions and its libraries. Prints the wheel's path.
build_and_check() {
  local target=$1 arch
  local dist=$work/dist/$target
  local args=(--profile "$profile" --zig --compatibility manylinux2014 --out "$dist")
  if [ "$target" = host ]; then
    arch=$(uname -m)
  else
    arch=${target%%-*}
    args+=(--target "$target")
  fi
  rm -rf "$dist"
  echo "== wheel: maturin build ${args[*]}" >&2
  (cd assets/python && maturin build "${args[@]}" >&2) ||
    fail "maturin could not build the $target wheel"
  local wheel
  wheel=$(ls "$dist"/torchtop-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || fail "maturin left no wheel in $dist"
  echo "   $(basename "$wheel")" >&2
  case $(basename "$wheel") in
    *manylinux_2_17_"$arch"*|*manylinux2014_"$arch"*) ;;
    *) fail "the wheel's tag is not manylinux2014 (glibc 2.17): $(basename "$wheel")" ;;
  esac
  local shown
  shown=$(auditwheel show "$wheel" 2>&1) || fail "auditwheel show failed: $shown"
  echo "$shown" | sed 's/^/   auditwheel: /' >&2
  # auditwheel names the most compatible tag; its glibc must be 2.17 or older.
  local minor
  minor=$(grep -o "manylinux_2_[0-9]*_$arch" <<<"$shown" | head -1 | sed -E 's/manylinux_2_([0-9]+)_.*/\1/')
  [ -n "$minor" ] && [ "$minor" -le 17 ] || fail "auditwheel does not place the wheel at glibc 2.17 or older"
  local unpacked=$dist/unpacked
  python3 -m zipfile -e "$wheel" "$unpacked"
  local bin
  bin=$(ls "$unpacked"/torchtop-*.data/scripts/torchtop)
  [ -f "$unpacked/torchtop_agent.py" ] || fail "the wheel has no torchtop_agent module"
  [ ! -e "$unpacked/sitecustomize.py" ] || fail "the wheel must not install a sitecustomize.py"
  local needed newest
  needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  echo "   NEEDED: $needed" >&2
  grep -q nvidia <<<"$needed" && fail "the binary links an NVIDIA library: $needed"
  newest=$(readelf -W --dyn-syms "$bin" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "   newest glibc symbol version: $newest" >&2
  [ "$(printf '%s\nGLIBC_2.17\n' "$newest" | sort -V | tail -1)" = GLIBC_2.17 ] ||
    fail "the binary needs $newest, newer than glibc 2.17"
  echo "$wheel"
}

wheel=$(build_and_check host)
if [ "${TORCHTOP_WHEEL_AARCH64:-0}" = 1 ]; then
  build_and_check aarch64-unknown-linux-gnu >/dev/null
fi

echo "== wheel: install into a fresh venv"
venv=$work/venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --no-index "$wheel" || fail "pip could not install $wheel"
export PATH=$venv/bin:$PATH
[ "$(command -v torchtop)" = "$venv/bin/torchtop" ] || fail "torchtop is not the venv's: $(command -v torchtop)"

echo "== wheel: torchtop --version"
version=$(torchtop --version)
echo "   $version"
grep -Eq '^torchtop [0-9.]+ \(commit ([0-9a-f]{7}|unknown), features: [^)]+\)$' <<<"$version" ||
  fail "--version does not name the version, commit and features: $version"

echo "== wheel: the fake NVML"
cargo build --quiet -p fake-nvml --target-dir target/fake-nvml
cp target/fake-nvml/debug/libnvidia_ml.so "$work/libnvidia-ml.so.1"
nvml=$work/libnvidia-ml.so.1

tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
export TORCHTOP_AGENT_DIR=$tmp/agents TORCHTOP_AGENT_INTERVAL_MS=100

wait_for_socket() {
  local pid=$1
  for _ in $(seq 200); do
    [ -S "$TORCHTOP_AGENT_DIR/$pid.sock" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "process $pid ended before its agent served"
    sleep 0.1
  done
  fail "no agent socket for process $pid after 20 s"
}

echo "== wheel: torchtop run -- python (stand-in torch), and import torchtop_agent in the venv"
train='import time, torch
torch.cuda._fake_init((0,))
while True:
    time.sleep(0.05)'
PYTHONPATH=$root/tests/python/fake_torch torchtop run -- python -c "$train" &
run_pid=$!
pids+=("$run_pid")
wait_for_socket "$run_pid"
in_code='import os, sys, time, torch, torchtop_agent
assert torchtop_agent.__file__.startswith(sys.prefix), torchtop_agent.__file__
torch.cuda._fake_init((0,))
torchtop_agent.start()
while True:
    time.sleep(0.05)'
PYTHONPATH=$root/tests/python/fake_torch python -c "$in_code" &
code_pid=$!
pids+=("$code_pid")
wait_for_socket "$code_pid"

sed -e "s/{{pid:0}}/$run_pid/" -e "s/{{pid:1}}/$code_pid/" tests/fixtures/one_gpu.toml >"$tmp/scenario.toml"
export TORCHTOP_FAKE_NVML_SCENARIO=$tmp/scenario.toml

echo "== wheel: torchtop --once --nvml-lib <fake>"
once=$(torchtop --once --nvml-lib "$nvml")
echo "$once" | head -5 | sed 's/^/   /'
grep -q "H100 80GB HBM3" <<<"$once" || fail "--once does not show the fake GPU"

echo "== wheel: torchtop --once --json sees both agents' allocator figures"
torchtop --once --json --nvml-lib "$nvml" >"$tmp/once.json"
python3 - "$tmp/once.json" "$run_pid" "$code_pid" <<'EOF' || fail "the allocator section is missing"
import json, sys
doc = json.load(open(sys.argv[1]))
for pid in map(int, sys.argv[2:]):
    rows = [p for p in doc["processes"] if p["pid"] == pid]
    torch = rows[0].get("torch") if rows else None
    assert torch and torch["devices"], f"process {pid}: no allocator figures in {rows}"
    device = torch["devices"][0]
    assert device["allocated_bytes"] > 0, device
    print(f"   pid {pid}: allocated {device['allocated_bytes']} B, reserved {device['reserved_bytes']} B")
EOF
echo "== wheel: all checks passed ($(basename "$wheel"))"
