"""Node 0 lost: the time from the loss to the next training step (issue 34), and where the seconds go, on the etcd
node group beside torchrun's c10d rendezvous.
Three nodes are network namespaces t46c1..3 (10.246.46.2..4, bridge t46cbr: names no other suite uses), one rank
each, Gloo, both launchers elastic (--nnodes 2:3) with --max-restarts 1, one checkpoint folder every node reads:
  taehv-run  --rdzv-backend etcd, the etcd cluster of three members, one in each namespace (as EtcdNetns does; client
             port 24679, peer 24680), no --master-addr (each formation's master is its lowest surviving node)
  torchrun   --rdzv-backend c10d, its store on node 0 (is_host), --rdzv-endpoint 10.246.46.2:29847
The worker (--worker):
  taehv-train  (default: the project's own) TAEHV on tiny synthetic clips (32x32, 4 frames, batch 1 a rank), plain
               SGD, a checkpoint every 5 steps, `--resume latest`; it says which checkpoint it resumed from and how
               long the load took
  ddp          bench/resilience/ddp_loop.py: Python DDP, 0.2 s of CPU a step, a checkpoint every 5 steps
Each node's processes see a /etc/hosts naming the namespaces and a resolv.conf naming 127.0.0.1 (as EtcdNetns's
nodes do): c10d looks peers' names up, and the machine's DNS server cannot be reached from the namespaces, where each
lookup would wait for it.
The fault, after rank 0's step 12 of the first attempt: `ip link set t46c1-v down` (node 0 and, for taehv-run, its
etcd member cut off; the loss of a machine as the others see it). Every line the launchers and workers print is
stamped with this machine's clock as it arrives (one clock for all namespaces), and so is each event of an
`etcdctl watch` on the run's node records from node 1's namespace (the DELETE of node 0's record: its lease expired).
From the cut: the next training step (the first step line of the restarted attempt, on any node), which checkpoint
it resumed from and its load time, and for taehv-run the breakdown (node 1 and node 2): node 0's lease expired, the
loss seen, the old workers ended (and by what), registered again, formed, workers started, the worker's first line
(taehv-train: c10d's, as it joins the store), the worker ready (taehv-train: rank 0's summary, after the process
group, the model, the checkpoint load and rank 0's weights sent to every rank).
Each measurement ends CAP_S after the fault (--cap); each run has a folder (and an etcd cluster) of its own. Usage
(root; after a build; about 1.5 min a run with taehv-run):
  python3 bench/group/node0_loss_bench.py [--worker taehv-train|ddp] [--runs N] [--node-timeout S]
      [--shutdown-grace S] [taehv-run|torchrun ...]
One JSON object a run is appended to <logs>/results.jsonl."""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "resilience"))
from resilience_bench import BIN, LOOP, PY, ROOT, TORCHRUN  # noqa: E402  the programs and worker bench/resilience runs

PFX, BR, NET = "t46c", "t46cbr", "10.246.46"
NODES = 3
RUN_ID = "t46c-bench"
ETCD_CLIENT, ETCD_PEER = 24679, 24680  # each namespace has its own ports; below 32768, no test uses them
MASTER_PORT, TORCHRUN_PORT = 29846, 29847
STEPS, FAULT_AFTER, CKPT_EVERY = 40, 12, 5
TOKEN = "node0-loss-bench-token-0123456789"


def addr(node):
    return f"{NET}.{node + 2}"


def endpoints():
    return ",".join(f"{addr(i)}:{ETCD_CLIENT}" for i in range(NODES))


def namespaces():
    env = dict(os.environ, PFX=PFX, BR=BR, NET=NET)
    p = subprocess.Popen(["bash", os.path.join(ROOT, "tests/infra/group/netns_nodes.sh"), "serve", str(NODES)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    assert p.stdout.readline().strip() == "READY", "namespaces did not come up"
    return p


def in_ns(node, argv, etc_dir=None):
    """argv in namespace `node`; with `etc_dir`, its hosts and resolv.conf bind-mounted over /etc's (a mount
    namespace of its own, as tests/core/group/netns/netns_harness.h's NodeProcess does)."""
    wrap = ["nsenter", f"--net=/run/netns/{PFX}{node + 1}", "--"]
    if etc_dir:
        wrap += ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                 'mount --bind "$0/hosts" /etc/hosts && mount --bind "$0/resolv.conf" /etc/resolv.conf && exec "$@"',
                 etc_dir]
    return wrap + argv


def write_etc(work):
    etc = os.path.join(work, "etc")
    os.makedirs(etc, exist_ok=True)
    hosts = open("/etc/hosts").read() + f"\n{NET}.1 {BR}\n"
    hosts += "".join(f"{addr(i)} {PFX}{i + 1}\n" for i in range(NODES))
    open(os.path.join(etc, "hosts"), "w").write(hosts)
    open(os.path.join(etc, "resolv.conf"), "w").write("nameserver 127.0.0.1\n")
    return etc


class Stamped:
    """A process whose output lines are stamped with time.time() as they arrive, kept and written to `log`."""

    def __init__(self, argv, log, env=None):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
        self.lines = []  # (t, text)
        self.ended = None  # (t, exit status)
        self.thread = threading.Thread(target=self._read, args=(log,), daemon=True)
        self.thread.start()

    def _read(self, log):
        with open(log, "w") as f:
            for raw in iter(self.p.stdout.readline, b""):
                t = time.time()
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append((t, line))
                f.write(f"{t:.3f} {line}\n")
                f.flush()

    def poll(self):
        if self.ended is None and self.p.poll() is not None:
            self.ended = (time.time(), self.p.returncode)
        return self.ended

    def first(self, pattern, after=0.0):
        """(t, match) of the first line at or after `after` matching `pattern`, else None."""
        for t, line in list(self.lines):
            if t >= after:
                m = re.search(pattern, line)
                if m:
                    return t, m
        return None

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()
        self.thread.join(timeout=5)


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
    while etcdctl("get", "/").returncode != 0:
        assert time.time() < deadline, f"etcd did not answer in 60 s; logs in {work}"
        time.sleep(0.2)
    return procs


def etcdctl(*args):
    return subprocess.run(["etcdctl", "--endpoints", endpoints(), "--dial-timeout", "1s", *args],
                          env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True)


def etcd_leader():
    """The node (0..2) whose etcd member leads, else None."""
    r = etcdctl("endpoint", "status", "-w", "json")
    try:
        for s in json.loads(r.stdout):
            if s["Status"]["leader"] == s["Status"]["header"]["member_id"]:
                return [f"{addr(i)}:{ETCD_CLIENT}" for i in range(NODES)].index(s["Endpoint"])
    except (ValueError, KeyError):
        pass
    return None


class TaehvTrain:
    name = "taehv-train"
    step = r"(?:^|\] )step (\d+)/\d+ \|"  # rank 0's log line after each step (taehv-run prefixes "[N:R] ")
    resumed = r"resumed from \S+/checkpoint-(\d+) at step \d+(?: \(checkpoint loaded in ([0-9.]+) s\))?"
    # Rank 0's summary: after the process group, the model, the checkpoint load and rank 0's weights everywhere.
    ready = r"taehv-train: \d+ rank\(s\), backend"

    @staticmethod
    def argv(ckpt):
        sets = ["data.size=32", "data.frames=4", "train.threads=1", "log.every=1", "log.preview_every=0",
                "checkpoint.export_safetensors=false", f"train.steps={STEPS}", f"output.dir={ckpt}", "train.seed=3",
                "train.optimizer=sgd", "train.lr=0.5", "train.warmup_steps=0", "train.grad_clip=0",
                "train.weight_decay=0", f"checkpoint.every={CKPT_EVERY}", "checkpoint.keep=20", "dist.bucket_mb=4",
                "train.batch_per_rank=1"]
        return [os.path.join(BIN, "taehv-train")] + [a for s in sets for a in ("--set", s)] + ["--resume", "latest"]


class Ddp:
    name = "ddp"
    step = r"STEP (\d+) \d+ [0-9.]+"
    resumed = r"PID \d+ \d+ [1-9]"  # a restarted attempt's rank; it loads latest.pt next (not timed)
    ready = r"PID \d+ \d+ [1-9]"  # after init_process_group

    @staticmethod
    def argv(ckpt):
        return [PY, LOOP, str(STEPS), ckpt]


WORKERS = {w.name: w for w in (TaehvTrain, Ddp)}


def command(launcher, worker, node, ckpt, args):
    if launcher == "taehv-run":
        argv = [os.path.join(BIN, "taehv-run"), "--backend", "local", "--nnodes", "2:3", "--node-rank", str(node),
                "--master-port", str(MASTER_PORT), "--nproc-per-node", "1", "--max-restarts", "1", "--run-id",
                RUN_ID, "--rdzv-backend", "etcd", "--rdzv-endpoint", endpoints()]
        if args.node_timeout:
            argv += ["--node-timeout", args.node_timeout]
        if args.shutdown_grace:
            argv += ["--shutdown-grace", args.shutdown_grace]
        return argv + ["--"] + worker.argv(ckpt)
    # torchrun: node 0's agent hosts the c10d store (is_host; inside a namespace its host name does not resolve to
    # the endpoint's address); --local-addr, else the workers meet at the host name, loopback in every namespace.
    argv = [TORCHRUN, "--nnodes", "2:3", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{addr(0)}:{TORCHRUN_PORT}",
            "--rdzv-id", RUN_ID, "--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}",
            "--nproc-per-node", "1", "--max-restarts", "1", "--local-addr", addr(node)]
    if worker is TaehvTrain:
        return argv + ["--no-python"] + worker.argv(ckpt)
    return argv + worker.argv(ckpt)[1:]


# The breakdown on a survivor (taehv-run's log lines, then the worker's), each the first line after the cut.
EVENTS = [
    ("loss seen", r"lost: its etcd lease expired"),
    ("old workers ended", r"the job was stopped by the node group"),
    ("registered again", r"this node registered as"),
    ("formed", r"node group \(etcd\): formation 1: "),
    ("workers started", r"this node runs ranks .*, restart 1$"),
]


def breakdown(node, fault_t, worker):
    """Seconds from the cut to each event on survivor `node` (a Stamped), and how its old workers ended."""
    out = {}
    for name, pattern in EVENTS:
        hit = node.first(pattern, fault_t)
        out[name] = round(hit[0] - fault_t, 2) if hit else None
    started = node.first(EVENTS[-1][1], fault_t)
    if started:  # the worker's first line (taehv-train: c10d's, as it joins the store), then its "ready" line
        for name, pattern in (("worker's first line", r"^\[\d+:\d+\] "), ("worker ready", worker.ready)):
            hit = node.first(pattern, started[0])
            out[name] = round(hit[0] - fault_t, 2) if hit else None
    if node.first(r"shutdown grace elapsed; sending SIGKILL", fault_t):
        out["old workers stopped by"] = "SIGKILL at the end of --shutdown-grace"
    elif node.first(r"did not end within \d+ s of the stop signal", fault_t):
        out["old workers stopped by"] = "taehv-train's own limit after SIGTERM"
    else:
        out["old workers stopped by"] = "SIGTERM"
    return out


def run(launcher, worker, top, args):
    # A folder of its own: a fresh etcd cluster (the last run's formations would count as restarts), checkpoints, logs.
    work = tempfile.mkdtemp(prefix=f"{launcher}-{worker.name}-", dir=top)
    ns = namespaces()
    etc = write_etc(work)
    etcd = start_etcd(work) if launcher == "taehv-run" else []
    ckpt = tempfile.mkdtemp(dir=work)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0", TAEHV_JOB_TOKEN=TOKEN,
               PYTHONPATH=os.path.join(ROOT, "examples", "progress"), PYTHONUNBUFFERED="1")
    watch = None
    if launcher == "taehv-run":  # node 1's view of the records: node 0's DELETE is its lease expiring
        watch = Stamped(in_ns(1, ["etcdctl", "--endpoints", f"{addr(1)}:{ETCD_CLIENT}", "watch", "--prefix",
                                  f"/taehv/{RUN_ID}/nodes/"]), os.path.join(work, "watch.log"),
                        dict(os.environ, ETCDCTL_API="3"))
    load = os.getloadavg()[0]
    nodes = []
    for node in range(NODES):
        nodes.append(Stamped(in_ns(node, command(launcher, worker, node, ckpt, args), etc),
                             os.path.join(work, f"node{node}.log"), env))
        time.sleep(0.3)  # node 0 first: it hosts torchrun's c10d store

    fault_t, leader, result = None, None, {}
    deadline = time.time() + 300 + args.cap  # start-up and 12 steps, then the cap
    while time.time() < deadline:
        if fault_t is None:
            if nodes[0].first(worker.step.replace(r"(\d+)", str(FAULT_AFTER), 1)):
                leader = etcd_leader() if etcd else None
                fault_t = time.time()
                subprocess.run(["ip", "link", "set", f"{PFX}1-v", "down"], check=True)
            elif all(n.poll() for n in nodes):
                break
        else:
            ended = [n.poll() for n in nodes]
            step = None
            for n in nodes[1:]:
                resumed = n.first(worker.resumed, fault_t)
                hit = n.first(worker.step, resumed[0]) if resumed else None
                if hit and (step is None or hit[0] < step[0]):
                    step = (hit[0], hit[1], resumed[1])
            if step or (ended[1] and ended[2]) or time.time() - fault_t > args.cap:
                if step:
                    result["next step s"] = round(step[0] - fault_t, 2)
                    result["step"] = int(step[1].group(1))
                    if worker is TaehvTrain:
                        result["resumed from checkpoint"] = int(step[2].group(1))
                        if step[2].group(2):
                            result["checkpoint load s"] = float(step[2].group(2))
                    else:
                        result["resumed from checkpoint"] = result["step"] - 1
                result["ended"] = {i: [round(e[0] - fault_t, 1), e[1]] for i, e in enumerate(ended) if e}
                break
        time.sleep(0.05)
    if fault_t is not None and launcher == "taehv-run":
        node0_id = nodes[0].first(r"registered as /taehv/\S+/nodes/([0-9a-f]+)")
        if node0_id and watch:
            key = f"/taehv/{RUN_ID}/nodes/{node0_id[1].group(1)}"
            lines = list(watch.lines)
            for (t, line), (_, nxt) in zip(lines, lines[1:]):
                if t >= fault_t and line == "DELETE" and nxt == key:
                    result["lease expired s"] = round(t - fault_t, 2)
                    break
        result["etcd leader at the cut"] = leader
        for i in (1, 2):
            result[f"node {i}"] = breakdown(nodes[i], fault_t, worker)
        formed = nodes[1].first(EVENTS[3][1], fault_t)
        if formed:
            result["formation 1"] = formed[1].string.split("formation 1: ", 1)[1]
    for p in nodes + ([watch] if watch else []):  # the end of this measurement: whatever still runs goes
        p.kill()
    for p in etcd:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    ns.stdin.close()
    ns.wait()
    result.update(launcher=launcher, worker=worker.name, faulted=fault_t is not None, load=round(load, 1),
                  node_timeout=args.node_timeout or "15 (default)",
                  shutdown_grace=args.shutdown_grace or "30 (default)",
                  logs=os.path.join(work, "node*.log"),
                  time=time.strftime("%H:%M", time.gmtime(fault_t or time.time())))
    return result


def say(r, cap):
    if not r["faulted"]:
        return f"{r['launcher']:10} the fault was never made (no step {FAULT_AFTER}; see {r['logs']})"
    step = (f"{r['next step s']:.1f} s (step {r['step']}, resumed from checkpoint {r['resumed from checkpoint']}"
            + (f", loaded in {r['checkpoint load s']:.2f} s" if "checkpoint load s" in r else "") + ")"
            if "next step s" in r else f"none within {cap:.0f} s")
    ends = "; ".join(f"node {n} ended {e[0]:.1f} s after the cut, exit {e[1]}" for n, e in r["ended"].items())
    text = f"{r['launcher']:10} {r['worker']}, {r['time']} UTC, load {r['load']}: cut -> next training step {step}"
    text += f"; {ends or 'all nodes still ran'} (when measured)"
    if r["launcher"] == "taehv-run":
        text += (f"\n  etcd leader at the cut: node {r['etcd leader at the cut']}; node 0's lease expired (DELETE "
                 f"seen by node 1's watch) {r.get('lease expired s', '?')} s after the cut")
        for i in (1, 2):
            b = r[f"node {i}"]
            text += f"\n  node {i}: " + ", ".join(f"{k} {v}" if isinstance(v, str) else f"{k} {v} s"
                                                 for k, v in b.items() if v is not None)
        if "formation 1" in r:
            text += f"\n  formation 1: {r['formation 1']}"
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("launchers", nargs="*", metavar="taehv-run|torchrun", help="default: taehv-run then torchrun")
    parser.add_argument("--worker", choices=sorted(WORKERS), default="taehv-train")
    parser.add_argument("--runs", type=int, default=1, help="measurements of each launcher, interleaved")
    parser.add_argument("--node-timeout", default=os.environ.get("NODE_TIMEOUT", ""),
                        help="taehv-run's --node-timeout (default: its own, 15 s; env NODE_TIMEOUT)")
    parser.add_argument("--shutdown-grace", default="", help="taehv-run's --shutdown-grace (default: its own, 30 s)")
    parser.add_argument("--cap", type=float, default=float(os.environ.get("CAP_S", "120")),
                        help="seconds after the cut that a measurement ends (env CAP_S)")
    args = parser.parse_args()
    launchers = args.launchers or ["taehv-run", "torchrun"]
    if any(launcher not in ("taehv-run", "torchrun") for launcher in launchers):
        parser.error(f"launchers are taehv-run and torchrun, got {' '.join(launchers)}")
    worker = WORKERS[args.worker]
    if os.geteuid() != 0:
        sys.exit("node0_loss_bench.py: needs root (network namespaces, ip link); run it with sudo")
    needed = ([os.path.join(BIN, "taehv-run")] if "taehv-run" in launchers else []) + \
             ([TORCHRUN] if "torchrun" in launchers else []) + ([worker.argv("")[0]] if worker is TaehvTrain else [])
    for program in needed:
        if not os.access(program, os.X_OK):
            print(f"node0_loss_bench.py: {program} is not there: build it (cmake --build build --target "
                  f"{os.path.basename(program)}) or pick another --worker / launcher", file=sys.stderr)
            sys.exit(2)
    work = tempfile.mkdtemp(prefix="taehv-node0-loss-")
    print(f"logs in {work}; cap {args.cap:.0f} s; {NODES} nodes (network namespaces {PFX}1..{NODES}) x 1 rank of "
          f"{worker.name}, Gloo, --nnodes 2:3, --max-restarts 1; node 0's link cut after step {FAULT_AFTER}; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
          flush=True)
    results = {launcher: [] for launcher in launchers}
    for _ in range(args.runs):
        for launcher in launchers:
            r = run(launcher, worker, work, args)
            results[launcher].append(r)
            with open(os.path.join(work, "results.jsonl"), "a") as f:
                f.write(json.dumps(r) + "\n")
            print(say(r, args.cap), flush=True)
    for launcher, rs in results.items():
        steps = [r["next step s"] for r in rs if "next step s" in r]
        if len(rs) > 1:
            print(f"{launcher:10} cut -> next training step: median {statistics.median(steps):.1f} s of {len(steps)} "
                  f"run(s) that trained again, of {len(rs)}" if steps else f"{launcher:10} no run trained again",
                  flush=True)


if __name__ == "__main__":
    main()
