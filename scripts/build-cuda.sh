#!/usr/bin/env bash
# Builds taehv-train and its test suites against torch 2.14.1's CUDA 13 libtorch (libtorch_cuda, c10d
# ProcessGroupNCCL) and the NCCL 2.30 of the nvidia-nccl wheel, both in .venv-cuda/ (scripts/setup.sh --cuda), into
# BUILD_DIR (default build-cuda/). Needs the CUDA 13 toolkit (nvcc, headers; /usr/local/cuda or nvcc on PATH), not a
# GPU. Only the trainer: the launcher and plugins do not link libtorch. Run its CPU tests with
#   ctest --test-dir build-cuda
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-cuda}"
bash scripts/setup.sh --cuda
torch_dir=$(ls -d "$PWD"/.venv-cuda/lib/python3*/site-packages/torch/share/cmake/Torch | head -n1)
cuda_root=""
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_root=/usr/local/cuda
elif command -v nvcc >/dev/null; then
  cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
else
  echo "build-cuda: no CUDA toolkit (no /usr/local/cuda/bin/nvcc, no nvcc on PATH); the CUDA 13 toolkit is needed" \
       "to build against a CUDA libtorch" >&2
  exit 1
fi
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" -DCUDAToolkit_ROOT="$cuda_root" \
  -DTAEHV_NCCL=ON -DTAEHV_TRAINER_TESTS_ONLY=ON >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
grep -E "^-- taehv-train:" "$build/configure.log" || true
cmake --build "$build" -j"$(nproc)" --target trainer_tests
