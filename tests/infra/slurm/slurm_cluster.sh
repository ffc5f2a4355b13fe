#!/usr/bin/env bash
# A real SLURM 22.05 cluster on one Debian 12 machine, for the slurm backend's slow tests.
# Adapted from ../shared/infra/{netns.sh,slurm_netns.sh}; the project owns this copy.
#
#   BASE=/tmp/x bash slurm_cluster.sh start N   munged + slurmctld in the default network namespace (NET.1),
#                                              one slurmd per network namespace PFXi (NET.(i+1)) with UTS
#                                              hostname n<i>; nodelist n[1-N]; prints "ready" when all idle
#   BASE=/tmp/x bash slurm_cluster.sh stop N    cancels jobs, kills every process in the namespaces and the
#                                              daemons it started (by PID), removes namespaces and bridge
#
# SLURMD_TIMEOUT (default 30): seconds slurmctld waits for a silent slurmd before it sets that node DOWN (and, without
# --no-kill, ends its jobs); the node failure tests shorten it.
# Clients (srun, sbatch, scontrol) need SLURM_CONF=$BASE/etc/slurm.conf. Names, addresses and ports are
# chosen not to collide with the ssh backend's namespaces (ri-h*, ri-br0, 10.77.0.0/24) or a system SLURM.
# Needs root and the packages munge slurmctld slurmd slurm-client (scripts/setup.sh installs them).
set -euo pipefail
ACTION=${1:?start|stop}
N=${2:-3}
BASE=${BASE:?set BASE to a fresh directory (mktemp -d)}
PFX=${PFX:-sl-h}
BR=${BR:-sl-br0}
NET=${NET:-10.78.0}
CTLD_PORT=${CTLD_PORT:-16817}
SLURMD_PORT=${SLURMD_PORT:-16818}
export SLURM_CONF=$BASE/etc/slurm.conf
HOST=$(hostname -s)

wait_for() {  # wait_for SECONDS CMD...: polls every 0.1 s
  local t=$1
  shift
  for _ in $(seq 1 $((t * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "timeout after ${t}s waiting for: $*" >&2
  return 1
}

netns_up() {
  ip link show "$BR" >/dev/null 2>&1 || {
    ip link add "$BR" type bridge
    ip addr add "$NET.1/24" dev "$BR"
    ip link set "$BR" up
  }
  for i in $(seq 1 "$N"); do
    local ns=$PFX$i
    ip netns list | grep -qw "^$ns" && continue
    ip netns add "$ns"
    ip link add "$ns-v" type veth peer name eth0 netns "$ns"
    ip link set "$ns-v" master "$BR" up
    ip -n "$ns" addr add "$NET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$NET.1"
  done
}

clear_stale() {  # namespaces with our prefix left by a run that died before its stop: empty and remove them
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^$PFX[0-9]*$" || true); do
    echo "removing stale namespace $ns" >&2
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip link del "$ns-v" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
}

netns_down() {
  for i in $(seq 1 "$N"); do
    ip link del "$PFX$i-v" 2>/dev/null || true  # deleting one end removes the pair
    ip netns del "$PFX$i" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
}

kill_pid() {  # kill_pid PID: TERM, wait up to 5 s (a zombie counts as gone), then KILL
  local pid=$1
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null && ! grep -qs '^State:.*Z' "/proc/$pid/status" || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

start() {
  for tool in munged slurmctld slurmd srun; do
    command -v $tool >/dev/null || { echo "missing $tool: apt-get install munge slurmctld slurmd slurm-client" >&2; exit 1; }
  done
  clear_stale
  if ss -Hltn "sport = :$CTLD_PORT" | grep -q .; then
    echo "port $CTLD_PORT is in use (a slurmctld of an earlier run?): stop it, or set CTLD_PORT" >&2
    exit 1
  fi
  netns_up
  mkdir -p "$BASE"/{etc,state,log,run,munge}
  dd if=/dev/urandom of="$BASE/munge/munge.key" bs=1 count=1024 status=none
  chmod 755 "$BASE/munge"
  chmod 400 "$BASE/munge/munge.key"
  # One munged; its pathname socket is reachable from every network namespace.
  setsid munged -F --force --key-file="$BASE/munge/munge.key" --socket="$BASE/munge/munge.sock" \
    --pid-file="$BASE/munge/munged.pid" --log-file="$BASE/log/munged.log" --seed-file="$BASE/munge/munged.seed" \
    </dev/null >"$BASE/log/munged.out" 2>&1 &
  echo $! >"$BASE/run/munged.bgpid"
  wait_for 10 sh -c "munge -S $BASE/munge/munge.sock -n | unmunge -S $BASE/munge/munge.sock"
  # Hosts file bind-mounted over /etc/hosts in each node's private mount namespace: node names resolve
  # there to the namespaces' addresses, and the controller's host name to the bridge.
  {
    echo "127.0.0.1 localhost"
    echo "$NET.1 $HOST"
    for i in $(seq 1 "$N"); do echo "$NET.$((i + 1)) n$i"; done
  } >"$BASE/etc/hosts"
  cat >"$SLURM_CONF" <<EOF
ClusterName=taehvci
SlurmctldHost=$HOST($NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$BASE/munge/munge.sock
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=${SLURMD_TIMEOUT:-30}
InactiveLimit=0
KillWait=2
MinJobAge=300
JobRequeue=1
NodeName=n[1-$N] NodeHostname=n[1-$N] NodeAddr=$NET.[2-$((N + 1))] CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  setsid slurmctld -D -i -f "$SLURM_CONF" </dev/null >"$BASE/log/slurmctld.out" 2>&1 &
  echo $! >"$BASE/run/slurmctld.bgpid"
  wait_for 20 scontrol ping
  for i in $(seq 1 "$N"); do
    mkdir -p "$BASE/spool/n$i"
    # Not "ip netns exec": it remounts /sys, hiding /sys/fs/cgroup, and slurmd 22.05 then fails to start.
    setsid nsenter --net="/run/netns/$PFX$i" unshare --uts --mount --propagation private \
      bash -c "hostname n$i && mount --bind $BASE/etc/hosts /etc/hosts && exec slurmd -D -N n$i -f $SLURM_CONF" \
      </dev/null >"$BASE/log/slurmd-n$i.out" 2>&1 &
    echo $! >"$BASE/run/slurmd-n$i.bgpid"  # nsenter/unshare/bash exec into slurmd: same PID
  done
  wait_for 30 sh -c "[ \$(sinfo -h -N -t idle -o '%N' | wc -l) -eq $N ]"
  echo ready
}

stop() {
  if [ -f "$BASE/run/slurmctld.bgpid" ]; then
    scancel --quiet --full --signal=KILL --partition=debug 2>/dev/null || true
    scancel --quiet --partition=debug 2>/dev/null || true
  fi
  # Every process in our namespaces was started by this cluster (slurmd, slurmstepd, tasks).
  for i in $(seq 1 "$N"); do
    [ -e "/run/netns/$PFX$i" ] || continue
    for pid in $(ip netns pids "$PFX$i" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  for f in "$BASE"/run/slurmd-n*.bgpid "$BASE/run/slurmctld.bgpid" "$BASE/run/munged.bgpid"; do
    [ -f "$f" ] || continue
    kill_pid "$(cat "$f")"
    rm -f "$f"
  done
  netns_down
  return 0
}

case $ACTION in
  start) start ;;
  stop) stop ;;
  *) echo "usage: BASE=DIR $0 start|stop N" >&2; exit 2 ;;
esac
