"""Resilience benchmark (issue 33): the same 2-node fault under taehv-run and under torchrun, one after the other in
one run, the same worker (ddp_loop.py: Python DDP over Gloo, a checkpoint every 5 steps). Two "nodes" are network
namespaces t33r1 (10.73.34.2, node 0) and t33r2 (tests/infra/group/netns_nodes.sh), one rank each, --max-restarts 1.
Faults, each after rank 0's step 12 of the first attempt:
  hang  rank 1 blocks its main thread for good (process and Gloo threads alive)
  kill  rank 1 is SIGKILLed
  cut   node 1's link goes down (both launchers elastic, --nnodes 1:2, so node 0 may go on alone)
Measured, from the fault (the hung rank's own FAULT time, or when this script acted): every node stopped (both
first-attempt workers gone), and the next training step (rank 0's first STEP line of the restarted attempt). Each
measurement ends CAP_S after the fault ("> cap"). Defaults of both launchers otherwise: taehv-run's --hang-timeout
60 s and --node-timeout 15 s; torchrun's Gloo collective timeout (30 min) is not shortened.
Usage (root): python bench/resilience/resilience_bench.py [FAULT ...]   (default: hang kill cut); needs a build."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("TAEHV_BIN_DIR", os.path.join(ROOT, "build", "bin"))
PY = os.path.join(ROOT, ".venv", "bin", "python")
TORCHRUN = os.path.join(ROOT, ".venv", "bin", "torchrun")
LOOP = os.path.join(ROOT, "bench", "resilience", "ddp_loop.py")
PFX, BR, NET = "t33r", "t33rbr", "10.73.34"
CAP_S = float(os.environ.get("CAP_S", "120"))
STEPS, FAULT_AFTER = 40, 12


def namespaces():
    env = dict(os.environ, PFX=PFX, BR=BR, NET=NET)
    p = subprocess.Popen(["bash", os.path.join(ROOT, "tests/infra/group/netns_nodes.sh"), "serve", "2"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    assert p.stdout.readline().strip() == "READY", "namespaces did not come up"
    return p


def command(launcher, node, nnodes, ckpt):
    # torchrun: node 0's agent hosts the c10d store (is_host: inside a namespace its host name does not resolve to
    # the endpoint's address, so torchrun cannot tell by itself); --local-addr, else the workers are told to meet
    # at the host name, which resolves to loopback in every namespace.
    if launcher == "taehv-run":
        return [os.path.join(BIN, "taehv-run"), "--backend", "local", "--nnodes", nnodes, "--node-rank", str(node),
                "--master-addr", NET + ".2", "--master-port", "29600", "--nproc-per-node", "1",
                "--max-restarts", "1", "--", PY, LOOP, str(STEPS), ckpt]
    return [TORCHRUN, "--nnodes", nnodes, "--rdzv-backend", "c10d", "--rdzv-endpoint", NET + ".2:29700",
            "--rdzv-id", "bench", "--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}", "--nproc-per-node", "1", "--max-restarts", "1",
            "--local-addr", f"{NET}.{node + 2}", LOOP, str(STEPS), ckpt]


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def run(launcher, fault, work):
    ckpt = tempfile.mkdtemp(dir=work)
    nnodes = "1:2" if fault == "cut" else "2"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0", TAEHV_JOB_TOKEN="resilience-bench-token-0123456789",
               PYTHONPATH=os.path.join(ROOT, "examples", "progress"), PYTHONUNBUFFERED="1")
    if fault == "hang":
        env.update(BENCH_HANG_AT_STEP=str(FAULT_AFTER), BENCH_HANG_RANK="1")
    logs, procs = [], []
    for node in (0, 1):
        log = os.path.join(work, f"{launcher}-{fault}-node{node}.log")
        logs.append(log)
        argv = ["nsenter", f"--net=/run/netns/{PFX}{node + 1}", "--"] + command(launcher, node, nnodes, ckpt)
        procs.append(subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True))
        time.sleep(0.3)  # node 0 first: it hosts torchrun's c10d store

    def text():
        return "".join(open(l).read() for l in logs)

    pids, fault_t, stopped, restart_t = {}, None, None, None
    deadline = time.time() + 300
    while time.time() < deadline:
        t = text()
        for m in re.finditer(r"PID (\d) (\d+) 0", t):
            pids[int(m.group(1))] = int(m.group(2))
        if fault_t is None and re.search(rf"STEP {FAULT_AFTER} 0 ", t) and len(pids) == 2:
            if fault == "hang":
                m = re.search(r"FAULT hang 1 ([0-9.]+)", t)
                if m:
                    fault_t = float(m.group(1))
            elif fault == "kill":
                fault_t = time.time()
                os.kill(pids[1], signal.SIGKILL)
            else:
                fault_t = time.time()
                subprocess.run(["ip", "link", "set", f"{PFX}2-v", "down"], check=True)
        if fault_t is not None:
            if stopped is None and not any(alive(p) for p in pids.values()):
                stopped = time.time() - fault_t
            m = re.search(r"STEP (\d+) 1 ([0-9.]+)", t)
            if m and restart_t is None:
                restart_t = float(m.group(2)) - fault_t
            if (stopped is not None and restart_t is not None) or time.time() - fault_t > CAP_S:
                break
        time.sleep(0.05)
    for p in procs:  # the end of this measurement: whatever still runs goes
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    for node in (1, 2):
        subprocess.run(f"ip netns pids {PFX}{node} | xargs -r kill -KILL", shell=True)
    subprocess.run(["ip", "link", "set", f"{PFX}2-v", "up"])
    time.sleep(1)
    return fault_t is not None, stopped, restart_t


def fmt(s):
    return f"> {CAP_S:.0f} s" if s is None else f"{s:.1f} s"


def main():
    faults = sys.argv[1:] or ["hang", "kill", "cut"]
    ns = namespaces()
    work = tempfile.mkdtemp(prefix="taehv-resilience-")
    print(f"logs in {work}; cap {CAP_S:.0f} s; 2 nodes (network namespaces) x 1 rank, Gloo, --max-restarts 1")
    print(f"{'fault':6} {'launcher':10} {'every node stopped':>20} {'next step after restart':>25}")
    try:
        for fault in faults:
            for launcher in ("taehv-run", "torchrun"):
                faulted, stopped, restart = run(launcher, fault, work)
                if not faulted:
                    print(f"{fault:6} {launcher:10} the fault was never made (see the logs)")
                    continue
                print(f"{fault:6} {launcher:10} {fmt(stopped):>20} {fmt(restart):>25}", flush=True)
    finally:
        ns.stdin.close()
        ns.wait()


if __name__ == "__main__":
    main()
