#!/usr/bin/env bash
# README command 2: installs what is needed, builds, and runs every test (ctest). Pass ctest arguments to
# narrow it down, e.g. `bash scripts/test.sh -L unit` or `-L slow` (real SLURM/sshd infrastructure).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --cuda  # the CUDA build check (label cuda) and the real-NCCL probe need .venv-cuda too
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
