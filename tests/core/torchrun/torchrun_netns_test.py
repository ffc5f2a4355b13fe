"""Torchrun.TwoNodeLinesAcrossNetworkNamespaces: two multi-node torchrun command lines, each run on two network
namespaces (two hosts with their own addresses, tests/infra/netns_lib.sh) under the real torchrun and then with
taehv-run in its place, compared worker by worker as torchrun_compat_test.py compares one node; then, taehv-run only,
a c10d line without --node-rank whose endpoint is the second namespace's address (it leads). Needs root and
iproute2 (exits 77, skipped, without them). Namespace names t35h1/t35h2, bridge t35br, net 10.35.0.0/24: this
test's own.

usage: torchrun_netns_test.py TAEHV_RUN PYTHON
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torchrun_compat_test as compat

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "infra", "netns_lib.sh")
NETNS = "PFX=t35h BR=t35br NET=10.35.0; source " + LIB + "; "
MASTER = "10.35.0.2"  # t35h1's address: node 0

# name, source, the words per node ({rank}: the node rank, {port}: a free port), the case's expected differences
LINES = [
    ("Megatron-LM two nodes, static", "NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh: torchrun "
     "--nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES --node_rank $NODE_RANK --master_addr $MASTER_ADDR "
     "--master_port $MASTER_PORT pretrain_gpt.py ...",
     ["--nproc_per_node", "2", "--nnodes", "2", "--node_rank", "{rank}", "--master_addr", MASTER, "--master_port",
      "{port}", "pretrain_gpt.py", "--num-layers", "2"], {}),
    ("nanoGPT two nodes, static endpoint spelling", "karpathy/nanoGPT README.md: torchrun --nproc_per_node=8 "
     "--nnodes=2 --node_rank=1 --master_addr=123.456.123.456 --master_port=1234 train.py, with torchrun's "
     "--rdzv-endpoint in place of --master_addr/--master_port",
     ["--nproc_per_node=1", "--nnodes=2", "--node_rank={rank}", "--rdzv-endpoint=" + MASTER + ":{port}",
      "pretrain_gpt.py"], {}),
]


def sh(command):
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True)


def run_two(launcher, words, folder):
    """Node 0 in t35h1, node 1 in t35h2 ({rank}: the node's rank): exit codes, stderr, every worker's probe."""
    codes, errs, results, _ = compat.run_nodes(launcher, words, folder, 2,
                                               lambda rank: ["ip", "netns", "exec", "t35h%d" % (rank + 1)])
    return codes, errs, results


# c10d without --node-rank across the two namespaces, the endpoint on the second one (10.35.0.3, t35h2): under
# taehv-run the node that owns the endpoint's address leads as node 0 whatever the order they start in, the other
# joins and is node 1 (issue 35). taehv-run only: torchrun decides which node hosts its store by the machine's host
# name, which both namespaces share, so it has no host here (on one machine, torchrun_compat_test.py compares both).
C10D_ENDPOINT_ON_NODE_2 = ["--nproc_per_node=2", "--nnodes=2", "--rdzv-backend=c10d",
                           "--rdzv-endpoint=10.35.0.3:{port}", "pretrain_gpt.py"]


def run_c10d_endpoint_on_node_2():
    folder = tempfile.mkdtemp(prefix="taehv35-netns-")
    try:
        compat.make_workers(folder, {"pretrain_gpt.py": "script"})
        port = compat.free_port()
        line = [w.replace("{port}", str(port)) for w in C10D_ENDPOINT_ON_NODE_2]
        codes, errs, results, took = compat.run_nodes("taehv-run", line, folder, 2,
                                                      lambda i: ["ip", "netns", "exec", "t35h%d" % (i + 1)])
        problems = compat.exit_problems("taehv-run", codes, errs, results)
        if not problems:
            problems = compat.group_ranks_problems("taehv-run", results, 2, 2)
            if "node group: listening on port %d" % (port + 1) not in errs[1]:
                problems.append("t35h2, the endpoint's node, did not lead: " + errs[1][-300:])
            if "node 1 of 2" not in errs[0]:
                problems.append("t35h1 is not node 1: " + errs[0][-300:])
        return compat.report(f"c10d without --node-rank, endpoint on the second namespace: {len(results)} workers, "
                             f"{took:.2f} s", "issue 35: the endpoint may be any node", problems)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("skipped: needs root and iproute2 (ip netns)")
        return 77
    sh(NETNS + "netns_down 2")
    up = sh(NETNS + "netns_up 2")
    if up.returncode != 0:
        print("cannot make the namespaces: " + up.stderr.strip())
        return 1
    failures = 0
    start = time.monotonic()
    try:
        for name, source, words, own in LINES:
            folder = tempfile.mkdtemp(prefix="taehv35-netns-")
            try:
                compat.make_workers(folder, {"pretrain_gpt.py": "script"})
                port = str(compat.free_port())
                line = [w.replace("{port}", port) for w in words]
                tcodes, terrs, tres = run_two("torchrun", line, folder)
                hcodes, herrs, hres = run_two("taehv-run", line, folder)
                problems = (compat.exit_problems("torchrun", tcodes, terrs, tres) +
                            compat.exit_problems("taehv-run", hcodes, herrs, hres))
                if not problems:
                    problems = compat.compare(name, line, tres, hres, own, folder)
                failures += compat.report(f"{name}: {len(hres)} workers on 2 namespaces", source, problems)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        failures += run_c10d_endpoint_on_node_2()
    finally:
        sh(NETNS + "netns_down 2")
    print(f"{len(LINES) + 1} two-node lines, {failures} failed, {time.monotonic() - start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
