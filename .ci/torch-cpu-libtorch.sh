#!/usr/bin/env bash
# Installs PyPI's torch 2.11 wheel in DIR/venv, with what it needs to be imported, and lays out
# a CPU-only libtorch from it; prints the env to build the torch feature with.
# PyPI's Linux wheel is a CUDA 13 build: `import torch` loads libtorch_cuda, which needs the
# CUDA stack (about 3.5 GB of nvidia-* wheels; no GPU is needed to load them), so the venv gets
# torch's dependencies too: the real-torch Python tests (tests/python/test_real_torch.py) import
# it. Linking needs only libc10 + libtorch_cpu (which load libcudart and libcupti), so the
# LIBTORCH directory holds those and a stub libtorch.so.
# Usage: eval "$(bash torch-cpu-libtorch.sh DIR)"
set -euo pipefail
root=$(mkdir -p "$1" && cd "$1" && pwd)
venv=$root/venv
view=$root/libtorch-cpu
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check \
    torch==2.11.0 'nvidia-cuda-runtime==13.0.96.*' 'nvidia-cuda-cupti==13.0.85.*' >&2
if ! "$venv/bin/python" -W ignore::UserWarning -c 'import torch' >&2; then
    echo "torch 2.11.0 is installed in $venv but cannot be imported (above)" >&2
    exit 1
fi
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
