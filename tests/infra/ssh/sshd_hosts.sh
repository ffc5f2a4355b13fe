#!/usr/bin/env bash
# Test hosts for the ssh backend: N network namespaces on a bridge, each with a real OpenSSH sshd and its own
# hostname, key-only root login from the default namespace. Adapted from ../shared/infra/{netns,ssh_netns}.sh.
#
#   sshd_hosts.sh serve BASE N   bring the hosts up, print "READY" on stdout, then hold them until stdin reaches
#                                EOF (the test closed its pipe, or the test process died), then tear everything
#                                down (sshd by PID, namespaces, bridge). A crashed test leaves nothing behind.
#   sshd_hosts.sh down N         remove namespaces/bridge left by an earlier run (sshd must be gone already).
#
# Files in BASE: ssh_config (Host h1..hN -> 10.77.0.2.., and "hdown" -> an address nobody has), id_ed25519,
# known_hosts, hN/sshd.log. Environment: PFX (ri-h), BR (ri-br0), NET (10.77.0);
# HIDE="I:DIR" starts host I in its own mount namespace with an empty tmpfs over DIR (a host without taehv-run:
# all hosts share one filesystem otherwise).
# Pitfalls (see ../shared/infra/README.md): enter namespaces with nsenter (ip netns exec remounts /sys); sshd by
# absolute path; StrictModes no under /tmp; PID 1 reaps slowly, so wait on our own PIDs only.
set -euo pipefail
ACTION=${1:?serve|down}

# shellcheck source=../netns_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../netns_lib.sh"

wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/$1/22") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "sshd_hosts: sshd on $1 did not come up" >&2
  return 1
}

SERVE_PIDS=()
SERVE_N=0
teardown() {
  for p in "${SERVE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${SERVE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  netns_down "$SERVE_N"
}

serve() {
  local base=$1 n=$2
  SERVE_N=$n

  trap teardown EXIT
  trap 'exit 1' INT TERM HUP
  [ -x /usr/sbin/sshd ] || { echo "sshd_hosts: /usr/sbin/sshd missing (apt-get install openssh-server)" >&2; exit 3; }
  netns_down "$n"   # leftovers of a killed earlier run
  netns_up "$n"
  mkdir -p "$base" /run/sshd
  chmod 755 /run/sshd
  ssh-keygen -q -t ed25519 -N '' -C taehv-test -f "$base/id_ed25519"
  cp "$base/id_ed25519.pub" "$base/authorized_keys"
  chmod 600 "$base/authorized_keys"
  : > "$base/ssh_config"
  local hide=${HIDE:-} ; local hide_i=${hide%%:*} hide_dir=${hide#*:}
  for i in $(seq 1 "$n"); do
    local d=$base/h$i
    mkdir -p "$d"
    ssh-keygen -q -t ed25519 -N '' -f "$d/ssh_host_ed25519_key"
    cat > "$d/sshd_config" <<CFG
Port 22
ListenAddress 0.0.0.0
HostKey $d/ssh_host_ed25519_key
PidFile none
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile $base/authorized_keys
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 100
CFG
    /usr/sbin/sshd -t -f "$d/sshd_config"
    local pre="hostname h$i"
    local mnt=""
    if [ -n "$hide" ] && [ "$hide_i" = "$i" ]; then
      mnt="--mount"
      pre="$pre && mount -t tmpfs taehv-hidden $(printf '%q' "$hide_dir")"
    fi
    setsid nsenter --net="/run/netns/$PFX$i" unshare --uts $mnt \
      bash -c "$pre && exec /usr/sbin/sshd -D -e -f $d/sshd_config" </dev/null >"$d/sshd.log" 2>&1 &
    SERVE_PIDS+=($!)
    cat >> "$base/ssh_config" <<CFG
Host h$i
  HostName $NET.$((i+1))
CFG
  done
  cat >> "$base/ssh_config" <<CFG
Host hdown
  HostName $NET.250
Host *
  User root
  IdentityFile $base/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $base/known_hosts
  StrictHostKeyChecking accept-new
  BatchMode yes
  LogLevel ERROR
CFG
  for i in $(seq 1 "$n"); do wait_port "$NET.$((i+1))"; done
  echo READY
  cat >/dev/null || true   # hold the hosts until our stdin reaches EOF
}

case $ACTION in
  serve) serve "${2:?BASE}" "${3:-3}" ;;
  down) netns_down "${2:-3}" ;;
  *) echo "usage: $0 serve BASE N | down N" >&2; exit 2 ;;
esac
