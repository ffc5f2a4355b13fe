#!/usr/bin/env bash
# Installs every Debian package taehv-run needs to build, test and benchmark. Idempotent: when everything is
# present it only asks dpkg (well under a second). Needs root (or sudo) only when something is missing.
set -euo pipefail
packages=(
  # build
  cmake ninja-build g++ pkg-config ccache
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest
  # trainer: libtorch 1.13 (CPU, c10d Gloo) + a fast BLAS, video and image decoding
  libtorch-dev libopenblas0-openmp libgloo-dev
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libpng-dev libturbojpeg0-dev
  # tests and benchmarks: a real SLURM, real sshd hosts, torchrun baseline, fuzzing, k8s schema validation
  munge slurmctld slurmd slurm-client openssh-server openssh-client iproute2 procps
  python3-torch ffmpeg clang libfuzzer-14-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Node.js for the offline Kubernetes schema check: any node + npm will do. Some images carry NodeSource's
# nodejs, which bundles npm and conflicts with Debian's npm package, so ask for Debian's only when missing.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
