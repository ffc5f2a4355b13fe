#!/usr/bin/env bash
# The set-up on Debian 13 (trixie), proven on a Debian 12 machine: debootstraps a minimal trixie into ROOT, clones
# this repository into it (../shared bind-mounted beside it) and runs, inside, what README command 2 runs before
# ctest: scripts/setup.sh (Debian's packages by their trixie names, the project's .venv with torch 2.13.0 from this
# machine's wheels), scripts/build.sh, then the given ctest arguments (default: the unit tests). Not part of ctest:
# it downloads trixie's packages (~450 MB of .debs) and builds from cold (15-30 minutes on 2 cores).
#
#   bash tests/debian13/chroot_check.sh [ROOT] [-- CTEST_ARGS...]     (as root; ROOT default /srv/taehv-trixie)
#
# The machine's CPython 3.11 (pyenv, which the torch wheels on its disk are built for) and pip's local wheel
# folders are bind-mounted read-only, as a Debian 13 machine of this kind has them too. Mounts are undone on exit.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
root=/srv/taehv-trixie
if [[ $# -gt 0 && $1 != -- ]]; then root=$1; shift; fi
[[ ${1:-} == -- ]] && shift
ctest_args=("$@")
[[ ${#ctest_args[@]} -gt 0 ]] || ctest_args=(-L unit)
[[ $(id -u) -eq 0 ]] || { echo "chroot_check: run as root (debootstrap, mount, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "chroot_check: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

if [[ ! -f $root/etc/debian_version ]]; then
  echo "chroot_check: debootstrap trixie into $root" >&2
  debootstrap --variant=minbase --include=ca-certificates,git trixie "$root" http://deb.debian.org/debian >/dev/null
fi
echo "chroot_check: $root is Debian $(cat "$root/etc/debian_version")" >&2

mounted=()
bind() {  # bind SRC DST [ro]; DST must exist for a file
  [[ -d $1 ]] && mkdir -p "$root$2"
  mount --bind "$1" "$root$2"
  [[ ${3:-} == ro ]] && mount -o remount,bind,ro "$root$2"
  mounted=("$root$2" "${mounted[@]}")
}
cleanup() { for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
# ROOT on itself first: inside, / is then a mount point, which the tests' `unshare -m` (private mounts) needs.
mount --bind "$root" "$root"; mounted=("$root")
mount -t proc proc "$root/proc"; mounted=("$root/proc" "${mounted[@]}")
bind /sys /sys ro
bind /dev /dev
bind /dev/pts /dev/pts
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The machine's CA bundle too: it holds the certificate of this network's TLS proxy (PyPI is reached through it),
# which a stock trixie bundle lacks.
for d in /root/.pyenv /opt/wheels /opt/pypi /opt/pypi-more /etc/xdg/pip /etc/ssl/certs/ca-certificates.crt; do
  if [[ -d $d ]]; then bind "$d" "$d" ro; elif [[ -f $d ]]; then touch "$root$d"; bind "$d" "$d" ro; fi
done

# A fresh clone of the committed tree, as CI takes it, with ../shared beside it (the tests' reference data).
rm -rf "$root/src/taehv-run"
git clone -q "$repo" "$root/src/taehv-run"
[[ -d $repo/../shared ]] && bind "$(cd "$repo/../shared" && pwd)" /src/shared ro

pip_env=()
for v in $(env | grep -o '^PIP_[A-Z_]*'); do pip_env+=("$v=${!v}"); done
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 CI=true PYENV_ROOT=/root/.pyenv "${pip_env[@]}" \
  PATH=/root/.pyenv/shims:/root/.pyenv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'set -euo pipefail; cd /src/taehv-run
    echo "chroot_check: inside: Debian $(cat /etc/debian_version), $(python3.11 --version)" >&2
    start=$(date +%s); bash scripts/setup.sh; echo "chroot_check: setup.sh rc 0 in $(( $(date +%s) - start )) s" >&2
    start=$(date +%s); bash scripts/build.sh; echo "chroot_check: build.sh rc 0 in $(( $(date +%s) - start )) s" >&2
    cd build && ctest --output-on-failure -j"$(nproc)" "$@"' chroot_check "${ctest_args[@]}"
