#!/usr/bin/env bash
# README command 2: installs what is needed, builds, and runs every test (ctest). Pass ctest arguments to
# narrow it down, e.g. `bash scripts/test.sh -L unit` or `-L slow` (real SLURM/sshd infrastructure).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --cuda  # the CUDA build check (label cuda) and the real-NCCL probe need .venv-cuda too
bash scripts/build.sh
cd build
# Label chroot (the trainer built from cold in a bare Debian chroot with only the offline bundle, ~25 minutes) runs only
# when asked for by name (`bash scripts/test.sh -L chroot`); every other run, .ci/run's included, leaves it out, merged
# into a -LE of the caller's.
args=() exclude=chroot
[[ " $* " == *[Cc]hroot* ]] && exclude=""
while [[ $# -gt 0 ]]; do
  if [[ -n $exclude && ( $1 == -LE || $1 == --label-exclude ) && $# -gt 1 ]]; then
    exclude="chroot|$2"; shift 2
  else
    args+=("$1"); shift
  fi
done
[[ -z $exclude ]] || args+=(-LE "$exclude")
ctest --output-on-failure --timeout 900 "${args[@]}"
