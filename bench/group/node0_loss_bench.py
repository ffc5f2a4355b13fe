"""Node 0 lost: the time from the loss to the next training step (issue 34), on the etcd node group beside torchrun's
c10d rendezvous, one after the other in one run, the same worker (bench/resilience/ddp_loop.py: Python DDP over
Gloo, 0.2 s of CPU a step, a checkpoint every 5 steps in a folder every node reads).
Three nodes are network namespaces t45c1..3 (10.245.46.2..4, bridge t45cbr: names no other suite uses), one rank
each, both launchers elastic (--nnodes 2:3) with --max-restarts 1:
  taehv-run  --rdzv-backend etcd, the etcd cluster of three members, one in each namespace (as EtcdNetns does), no
             --master-addr (each formation's master is its lowest surviving node)
  torchrun   --rdzv-backend c10d, its store on node 0 (is_host), --rdzv-endpoint 10.245.46.2
The fault, after rank 0's step 12 of the first attempt: `ip link set t45c1-v down` (node 0 and, for taehv-run, its
etcd member cut off; the loss of a machine as the others see it). Measured from that moment: the next step (the
first STEP line of the restarted attempt, on any node; its own time.time()), for taehv-run when a survivor logged
the new formation's ranks (re-formed, its workers starting: the rest is Python, torch and Gloo start-up and the
checkpoint load), and which launchers had ended by then and how.
Each measurement ends CAP_S after the fault. Defaults otherwise (taehv-run's --node-timeout 15 s unless
NODE_TIMEOUT is set). Usage (root; after a build; about 4 min): python3 bench/group/node0_loss_bench.py [taehv-run|torchrun ...]"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "resilience"))
from resilience_bench import BIN, LOOP, PY, ROOT, TORCHRUN  # noqa: E402  the programs and worker bench/resilience runs
PFX, BR, NET = "t45c", "t45cbr", "10.245.46"
NODES = 3
CAP_S = float(os.environ.get("CAP_S", "120"))
NODE_TIMEOUT = os.environ.get("NODE_TIMEOUT", "")
STEPS, FAULT_AFTER = 60, 12
ETCD_CLIENT, ETCD_PEER = 2379, 2380  # each namespace has its own ports


def addr(node):
    return f"{NET}.{node + 2}"


def namespaces():
    env = dict(os.environ, PFX=PFX, BR=BR, NET=NET)
    p = subprocess.Popen(["bash", os.path.join(ROOT, "tests/infra/group/netns_nodes.sh"), "serve", str(NODES)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    assert p.stdout.readline().strip() == "READY", "namespaces did not come up"
    return p


def in_ns(node, argv):
    return ["nsenter", f"--net=/run/netns/{PFX}{node + 1}", "--"] + argv


def endpoints():
    return ",".join(f"{addr(i)}:{ETCD_CLIENT}" for i in range(NODES))


def start_etcd(work):
    cluster = ",".join(f"m{i}=http://{addr(i)}:{ETCD_PEER}" for i in range(NODES))
    procs = []
    for i in range(NODES):
        client, peer = f"http://{addr(i)}:{ETCD_CLIENT}", f"http://{addr(i)}:{ETCD_PEER}"
        argv = ["etcd", "--name", f"m{i}", "--data-dir", f"{work}/etcd{i}", "--listen-client-urls", client,
                "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", cluster, "--initial-cluster-token", work]
        procs.append(subprocess.Popen(in_ns(i, argv), stdout=open(f"{work}/etcd{i}.log", "w"),
                                      stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.time() + 60
    while subprocess.run(["etcdctl", "--endpoints", endpoints(), "--dial-timeout", "1s", "get", "/"],
                         env=dict(os.environ, ETCDCTL_API="3"), capture_output=True).returncode != 0:
        assert time.time() < deadline, f"etcd did not answer in 60 s; logs in {work}"
        time.sleep(0.2)
    return procs


def command(launcher, node, ckpt):
    if launcher == "taehv-run":
        argv = [os.path.join(BIN, "taehv-run"), "--backend", "local", "--nnodes", "2:3", "--node-rank", str(node),
                "--master-port", "29646", "--nproc-per-node", "1", "--max-restarts", "1", "--run-id", "t45c-bench",
                "--rdzv-backend", "etcd", "--rdzv-endpoint", endpoints()]
        if NODE_TIMEOUT:
            argv += ["--node-timeout", NODE_TIMEOUT]
        return argv + ["--", PY, LOOP, str(STEPS), ckpt]
    # torchrun: node 0's agent hosts the c10d store (is_host; inside a namespace its host name does not resolve to
    # the endpoint's address); --local-addr, else the workers meet at the host name, loopback in every namespace.
    return [TORCHRUN, "--nnodes", "2:3", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{addr(0)}:29746",
            "--rdzv-id", "t45c-bench", "--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}",
            "--nproc-per-node", "1", "--max-restarts", "1", "--local-addr", addr(node), LOOP, str(STEPS), ckpt]


def run(launcher, work):
    ns = namespaces()
    etcd = start_etcd(work) if launcher == "taehv-run" else []
    ckpt = tempfile.mkdtemp(dir=work)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0", TAEHV_JOB_TOKEN="node0-loss-bench-token-0123456789",
               PYTHONPATH=os.path.join(ROOT, "examples", "progress"), PYTHONUNBUFFERED="1")
    logs, procs = [], []
    for node in range(NODES):
        log = os.path.join(work, f"{launcher}-node{node}.log")
        logs.append(log)
        procs.append(subprocess.Popen(in_ns(node, command(launcher, node, ckpt)), stdout=open(log, "w"),
                                      stderr=subprocess.STDOUT, env=env, start_new_session=True))
        time.sleep(0.3)  # node 0 first: it hosts torchrun's c10d store

    def text():
        return "".join(open(l).read() for l in logs)

    fault_t, next_step, reformed, ended = None, None, None, {}
    deadline = time.time() + 180 + CAP_S  # start-up and 12 steps, then the cap
    while time.time() < deadline:
        t = text()
        if fault_t is None:
            if re.search(rf"STEP {FAULT_AFTER} 0 ", t):
                fault_t = time.time()
                subprocess.run(["ip", "link", "set", f"{PFX}1-v", "down"], check=True)
            elif all(p.poll() is not None for p in procs):
                break
        else:
            for node, p in enumerate(procs):
                if node not in ended and p.poll() is not None:
                    ended[node] = (time.time() - fault_t, p.returncode)
            if reformed is None and re.search(r"node group: this node runs ranks .*, restart 1$", t, re.M):
                reformed = time.time() - fault_t  # taehv-run: re-formed, starting the new formation's workers
            m = re.search(r"STEP (\d+) 1 ([0-9.]+)", t)
            if m and next_step is None:
                next_step = (float(m.group(2)) - fault_t, int(m.group(1)))
            survivors_done = all(n in ended for n in (1, 2))
            if next_step is not None or survivors_done or time.time() - fault_t > CAP_S:
                break
        time.sleep(0.05)
    for p in procs + etcd:  # the end of this measurement: whatever still runs goes
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    ns.stdin.close()
    ns.wait()
    return fault_t is not None, next_step, reformed, ended


def main():
    launchers = sys.argv[1:] or ["taehv-run", "torchrun"]
    work = tempfile.mkdtemp(prefix="taehv-node0-loss-")
    print(f"logs in {work}; cap {CAP_S:.0f} s; {NODES} nodes (network namespaces {PFX}1..{NODES}) x 1 rank, Gloo, "
          f"--nnodes 2:3, --max-restarts 1; node 0's link cut after step {FAULT_AFTER}; {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    for launcher in launchers:
        faulted, next_step, reformed, ended = run(launcher, work)
        if not faulted:
            print(f"{launcher:10} the fault was never made (no step {FAULT_AFTER}; see the logs)", flush=True)
            continue
        step = (f"{next_step[0]:.1f} s (step {next_step[1]}, resumed from the checkpoint)" if next_step
                else f"none within {CAP_S:.0f} s")
        ends = "; ".join(f"node {n} ended {ended[n][0]:.1f} s after the cut, exit {ended[n][1]}" if n in ended
                         else f"node {n} still ran" for n in range(NODES))
        group = f"re-formed and starting workers after {reformed:.1f} s; " if reformed is not None else ""
        print(f"{launcher:10} cut -> next training step: {step}; {group}{ends} (when measured)", flush=True)


if __name__ == "__main__":
    main()
