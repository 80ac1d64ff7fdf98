#!/usr/bin/env bash
# Prepares a CPU-only libtorch 2.11 from PyPI's torch wheel and prints the env to build with.
# PyPI's Linux wheel is a CUDA 13 build: its libtorch.so needs libtorch_cuda and the whole CUDA
# stack (GBs of nvidia-* wheels). A CPU machine needs only libc10 + libtorch_cpu (which load
# libcudart and libcupti, ~15 MB of wheels), so we lay out a LIBTORCH directory with those and
# a stub libtorch.so. Usage: eval "$(bash torch-cpu-libtorch.sh DIR)"
set -euo pipefail
root=$(mkdir -p "$1" && cd "$1" && pwd)
venv=$root/venv
view=$root/libtorch-cpu
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    torch==2.11.0 'nvidia-cuda-runtime==13.0.96.*' 'nvidia-cuda-cupti==13.0.85.*' >&2
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch=$site/torch
cuda=$site/nvidia/cu13/lib
rm -rf "$view"
mkdir -p "$view/lib"
ln -s "$torch/include" "$view/include"
for lib in "$torch/lib/libc10.so" "$torch/lib/libtorch_cpu.so" "$torch/lib/libgomp.so.1" \
           "$cuda/libcudart.so.13" "$cuda/libcupti.so.13"; do
    ln -s "$lib" "$view/lib/"
done
echo 'void torchtop_cpu_only_libtorch(void) {}' > "$root/stub.c"
cc -shared -fPIC -o "$view/lib/libtorch.so" -Wl,-soname,libtorch.so -Wl,--no-as-needed \
    -L"$view/lib" -ltorch_cpu "$root/stub.c"
echo 2.11.0 > "$view/build-version"
echo "export LIBTORCH='$view' LD_LIBRARY_PATH='$view/lib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
