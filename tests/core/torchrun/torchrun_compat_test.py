"""Torchrun.CommandLinesRunUnchangedWithTaehvRun: real torchrun command lines, each run twice with the same words,
once under the real torchrun of the project's Python environment and once with taehv-run in its place. The worker
is probe.py under the script or module name of the project the line comes from; it writes its argv, sys.executable
and environment. The two are compared field by field; every difference allowed is listed below with its reason.
Then bad input: one line on stderr each, exit 2, no worker started.

usage: torchrun_compat_test.py TAEHV_RUN PYTHON   (PYTHON: the interpreter of the virtual environment with torch)
"""
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

TAEHV_RUN, PYTHON = sys.argv[1], sys.argv[2]
VENV = os.path.dirname(os.path.dirname(os.path.abspath(PYTHON)))
TORCHRUN = os.path.join(VENV, "bin", "torchrun")
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")
CORES = len(os.sched_getaffinity(0))

# Variables that differ on every run or belong to the harness: never compared.
RUN_LOCAL = {"PROBE_OUT", "_"}
# Set by taehv-run only, on purpose: its own (TAEHV_*), and sizing's Gloo interface for a one-machine job.
TAEHV_ONLY_PREFIXES = ("TAEHV_",)
TAEHV_ONLY = {"GLOO_SOCKET_IFNAME"}
# Expected differences, each with its reason; a case adds its own.
EXPECTED = {
    # torchrun's agent hands its rendezvous store to the workers; taehv-run has no agent store, so rank 0's
    # init_process_group creates it at MASTER_ADDR:MASTER_PORT.
    "TORCHELASTIC_USE_AGENT_STORE": ("True", "False"),
    # torchrun always gives each worker an error file in its temporary log folder; taehv-run gives one when its own
    # TORCHELASTIC_ERROR_FILE is set (an outer launcher reads it) or torchrun's log layout is on (--log-dir with
    # --redirects/--tee): then both put it at LOG_DIR/.../attempt_N/LOCAL_RANK/error.json.
    "TORCHELASTIC_ERROR_FILE": "torchrun-only-or-path",
    # torchrun sets 1 when nproc_per_node > 1 and leaves it unset for one worker; taehv-run sets
    # max(1, cpu cores / local workers) in both cases (the same warning is printed when it sets one for several).
    "OMP_NUM_THREADS": "omp-rule",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Each case: name, where the line comes from, the words after `torchrun` ({port}: a free port), the worker files to
# create (name -> "script" | "module" | "exe"), and the case's own expected differences (name -> reason).
CASES = [
    ("nanoGPT single node", "karpathy/nanoGPT README.md: torchrun --standalone --nproc_per_node=8 train.py "
     "config/train_gpt2.py",
     ["--standalone", "--nproc_per_node=2", "train.py", "config/train_gpt2.py"], {"train.py": "script"},
     {"MASTER_ADDR": "--standalone: torchrun's c10d store on 'localhost', taehv-run's master 127.0.0.1",
      "MASTER_PORT": "--standalone: a free port each", "TORCHELASTIC_RUN_ID": "--standalone: a random id each"}),
    ("nanoGPT multi-node form, one node", "karpathy/nanoGPT README.md: torchrun --nproc_per_node=8 --nnodes=2 "
     "--node_rank=0 --master_addr=123.456.123.456 --master_port=1234 train.py (here --nnodes=1 on 127.0.0.1)",
     ["--nproc_per_node=2", "--nnodes=1", "--node_rank=0", "--master_addr=127.0.0.1", "--master_port={port}",
      "train.py"], {"train.py": "script"}, {}),
    ("torchtitan run_train.sh", "pytorch/torchtitan run_train.sh: torchrun --nproc_per_node=${NGPU} --rdzv_backend "
     "c10d --rdzv_endpoint=localhost:0 --local-ranks-filter ${LOG_RANK} --role rank --tee 3 -m torchtitan.train "
     "--job.config_file ${CONFIG_FILE}",
     ["--nproc_per_node=2", "--rdzv_backend", "c10d", "--rdzv_endpoint=localhost:0", "--local-ranks-filter", "0",
      "--role", "rank", "--tee", "3", "-m", "torchtitan.train", "--job.config_file",
      "./torchtitan/models/llama3/train_configs/debug_model.toml"], {"torchtitan/train.py": "module"},
     {"MASTER_ADDR": "c10d: torchrun's workers get the store host's name, taehv-run's the endpoint's host",
      "MASTER_PORT": "port 0: a free port each",
      "TORCHELASTIC_ERROR_FILE": "--tee without --log-dir: torchrun logs to a temporary folder, taehv-run to the "
                                 "console only"}),
    ("pytorch/examples DDP tutorial", "pytorch/examples distributed/ddp-tutorial-series README: torchrun "
     "--standalone --nproc_per_node=4 multigpu_torchrun.py 50 10",
     ["--standalone", "--nproc_per_node=2", "multigpu_torchrun.py", "50", "10"], {"multigpu_torchrun.py": "script"},
     {"MASTER_ADDR": "--standalone (see nanoGPT)", "MASTER_PORT": "--standalone", "TORCHELASTIC_RUN_ID": "--standalone"}),
    ("pytorch/examples multinode, c10d with a node rank", "pytorch/examples distributed/ddp-tutorial-series "
     "slurm/sbatch_run.sh: torchrun --nnodes 4 --nproc_per_node 1 --rdzv_id $RANDOM --rdzv_backend c10d "
     "--rdzv_endpoint $head_node_ip:29500 multinode.py 50 10 (here one node)",
     ["--nnodes", "1", "--nproc_per_node", "2", "--rdzv_id", "4567", "--rdzv_backend", "c10d", "--rdzv_endpoint",
      "127.0.0.1:{port}", "multinode.py", "50", "10"], {"multinode.py": "script"},
     {"MASTER_ADDR": "c10d: torchrun's workers get the store host's name, taehv-run's the endpoint's host",
      "MASTER_PORT": "c10d: torchrun's workers get a port its agent picks, taehv-run's the endpoint's port"}),
    ("Megatron-LM pretrain_gpt_distributed.sh", "NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh: "
     "torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES --master_addr $MASTER_ADDR --master_port "
     "$MASTER_PORT pretrain_gpt.py --tensor-model-parallel-size 8 ...",
     ["--nproc_per_node", "2", "--nnodes", "1", "--master_addr", "localhost", "--master_port", "{port}",
      "pretrain_gpt.py", "--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1",
      "--num-layers", "2"], {"pretrain_gpt.py": "script"}, {}),
    ("HF transformers run_glue.py", "huggingface/transformers examples/pytorch/README.md: torchrun "
     "--nproc_per_node 8 pytorch/text-classification/run_glue.py --model_name_or_path google-bert/bert-large-"
     "uncased-whole-word-masking --task_name mrpc --do_train --do_eval --output_dir /tmp/mrpc_output",
     ["--nproc_per_node", "2", "--master_port", "{port}", "pytorch/text-classification/run_glue.py",
      "--model_name_or_path", "google-bert/bert-large-uncased-whole-word-masking", "--task_name", "mrpc",
      "--do_train", "--do_eval", "--output_dir", "/tmp/mrpc_output"],
     {"pytorch/text-classification/run_glue.py": "script"}, {}),
    ("elastic --nnodes 1:2, c10d, one machine", "PyTorch elastic quickstart (docs.pytorch.org/docs/stable/elastic/"
     "quickstart.html): torchrun --nnodes=1:4 --nproc-per-node=$NUM_TRAINERS --max-restarts=3 --rdzv-id=$JOB_ID "
     "--rdzv-backend=c10d --rdzv-endpoint=$HOST_NODE_ADDR YOUR_TRAINING_SCRIPT.py (here 1:2 and --node-rank 0, "
     "last_call_timeout=1 so that torchrun does not wait 30 s for a second node)",
     ["--nnodes=1:2", "--node-rank=0", "--nproc-per-node=2", "--max-restarts=3", "--rdzv-id=job35",
      "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-conf=last_call_timeout=1",
      "train.py"], {"train.py": "script"},
     {"MASTER_ADDR": "c10d (see multinode)", "MASTER_PORT": "c10d (see multinode)"}),
    ("Kubeflow PyTorchJob PET_* variables", "kubeflow/training-operator: the pod gets PET_NNODES, PET_NPROC_PER_NODE, "
     "PET_MASTER_ADDR, PET_MASTER_PORT and runs torchrun train.py",
     ["train.py", "--epochs", "1"], {"train.py": "script"}, {}),
    ("--no-python program", "torch/distributed/run.py docs: --no-python runs the script directly (torchrun "
     "--no-python ./train.sh)",
     ["--nproc-per-node=2", "--master-port={port}", "--no-python", "./train_exe", "--lr", "3e-4"],
     {"train_exe": "exe"}, {}),
    ("--run-path absolute script", "torch/distributed/run.py docs: --run-path runs /abs/path/script.py with "
     "runpy.run_path",
     ["--nproc-per-node=2", "--master-port={port}", "--run-path", "{dir}/train.py", "--steps", "2"],
     {"train.py": "script"}, {}),
    ("one worker, option=value spelling, logs", "torch/distributed/run.py docs: --log-dir with --redirects 3 "
     "(torchrun --log-dir=/tmp/logs --redirects=3 --nproc-per-node=1 train.py)",
     ["--nproc-per-node=1", "--master-port={port}", "--log-dir={dir}/logs", "--redirects=3", "--start-method=fork",
      "--monitor-interval=0.5", "train.py"], {"train.py": "script"}, {}),
    ("legacy underscore spellings and --max_restarts", "pytorch/examples distributed/tensor_parallelism "
     "run_example.sh: torchrun --nnodes 1 --nproc_per_node ${NGPU} --rdzv_id 101 --rdzv_endpoint=localhost:5972 "
     "${FILE} (static rendezvous)",
     ["--nnodes", "1", "--nproc_per_node", "2", "--rdzv_id", "101", "--rdzv_endpoint=localhost:{port}",
      "--max_restarts", "1", "fsdp_tp_example.py"], {"fsdp_tp_example.py": "script"}, {}),
]

PET_ENV = {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "PET_MASTER_ADDR": "127.0.0.1"}


def make_workers(folder, files):
    for name, kind in files.items():
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if kind == "module":
            open(os.path.join(os.path.dirname(path), "__init__.py"), "w").close()
        with open(PROBE) as f:
            text = f.read()
        if kind == "exe":
            text = "#!" + PYTHON + "\n" + text
        with open(path, "w") as f:
            f.write(text)
        if kind == "exe":
            os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def prepare(launcher, folder, extra_env):
    """An empty folder for the probes, the launcher's argv start and the environment without the launchers' own."""
    out = os.path.join(folder, "out")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_", "OMP_NUM_THREADS",
                                                                     "PYTHON_EXEC"))}
    env.update({"PROBE_OUT": out, "VIRTUAL_ENV": VENV}, **extra_env)
    return out, ([PYTHON, TORCHRUN] if launcher == "torchrun" else [TAEHV_RUN]), env


def probes(out):
    """Every worker's probe file, by name (rank_<RANK>.json)."""
    results = {}
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            results[name] = json.load(f)
    return results


def run(launcher, words, folder, extra_env):
    out, base, env = prepare(launcher, folder, extra_env)
    start = time.monotonic()
    p = subprocess.run(base + words, cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    results = probes(out)
    return p, results, took


def omp_ok(nproc, a, b):
    torch_expected = "1" if nproc > 1 else None
    taehv_expected = str(max(1, CORES // nproc))
    return a == torch_expected and b == taehv_expected


def compare(name, words, torch_res, taehv_res, own, folder):
    problems = []
    if sorted(torch_res) != sorted(taehv_res):
        return [f"workers differ: torchrun {sorted(torch_res)}, taehv-run {sorted(taehv_res)}"]
    for rank in sorted(torch_res):
        t, h = torch_res[rank], taehv_res[rank]
        nproc = int(t["env"].get("LOCAL_WORLD_SIZE", "1"))  # this worker's node's workers
        if t["argv"] != h["argv"]:
            problems.append(f"{rank} argv: torchrun {t['argv']!r}, taehv-run {h['argv']!r}")
        # The same interpreter: torchrun's is the one it runs under (its sys.executable), taehv-run's the active
        # virtual environment's bin/python3; two names of one file (python, python3 links) are the same interpreter.
        if os.path.realpath(t["executable"]) != os.path.realpath(h["executable"]):
            problems.append(f"{rank} executable: torchrun {t['executable']!r}, taehv-run {h['executable']!r}")
        te, he = t["env"], h["env"]
        for var in sorted(set(te) | set(he)):
            a, b = te.get(var), he.get(var)
            if a == b or var in RUN_LOCAL:
                continue
            if a is None and (var in TAEHV_ONLY or var.startswith(TAEHV_ONLY_PREFIXES)):
                continue
            if var in own:
                continue
            rule = EXPECTED.get(var)
            if rule == "omp-rule" and omp_ok(nproc, a, b):
                continue
            if rule == "torchrun-only-or-path" and (b is None or b.endswith("/error.json")):
                continue
            if isinstance(rule, tuple) and (a, b) == rule:
                continue
            problems.append(f"{rank} env {var}: torchrun {a!r}, taehv-run {b!r}")
    return problems


def report(what, source, problems):
    """Prints a case's line, where it comes from and its problems; 1 when it failed."""
    print(f"{'ok  ' if not problems else 'FAIL'} {what}")
    print(f"     from {source}")
    for p in problems:
        print("     " + p)
    return int(bool(problems))


def log_files(root):
    """Files under a torchrun log folder, without its first level (torchrun: RUN_ID_<random>; taehv-run: RUN_ID).
    A file at the top level keeps its name."""
    found = set()
    for dirpath, _, files in os.walk(root):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), root).split(os.sep)
            found.add("/".join(rel[1:]) if len(rel) > 1 else rel[0])
    return found


# Expected, explained difference: taehv-run keeps the job's status file (each rank's step, section and silence; the
# hang detection's, `taehv-run status`) at the top of --log-dir; torchrun has none.
TAEHV_ONLY_LOG_FILES = {"status.json"}


def run_cases():
    failures = 0
    for name, source, words, files, own in CASES:
        folder = tempfile.mkdtemp(prefix="taehv35-")
        try:
            make_workers(folder, files)
            port = str(free_port())
            line = [w.replace("{port}", port).replace("{dir}", folder) for w in words]
            extra = dict(PET_ENV, PET_MASTER_PORT=port) if "PET_" in name else {}
            tp, tres, ttook = run("torchrun", line, folder, extra)
            torch_logs = log_files(os.path.join(folder, "logs")) if os.path.isdir(os.path.join(folder, "logs")) else set()
            shutil.rmtree(os.path.join(folder, "logs"), ignore_errors=True)
            hp, hres, htook = run("taehv-run", line, folder, extra)
            taehv_logs = log_files(os.path.join(folder, "logs")) if os.path.isdir(os.path.join(folder, "logs")) else set()
            taehv_logs -= TAEHV_ONLY_LOG_FILES
            problems = []
            if tp.returncode != 0 or not tres:
                problems.append(f"torchrun failed ({tp.returncode}): {tp.stderr.strip()[-400:]}")
            if hp.returncode != 0 or not hres:
                problems.append(f"taehv-run failed ({hp.returncode}): {hp.stderr.strip()[-400:]}")
            if not problems:
                problems = compare(name, line, tres, hres, own, folder)
            if torch_logs != taehv_logs:
                problems.append(f"log files: torchrun {sorted(torch_logs)}, taehv-run {sorted(taehv_logs)}")
            failures += report(f"{name}: {len(tres)} worker(s), torchrun {ttook:.2f} s, taehv-run {htook:.2f} s"
                               + (f", {len(taehv_logs)} log files alike" if taehv_logs else ""), source, problems)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return failures


# torchrun's c10d rendezvous over two nodes without --node-rank (issue 35): both nodes' launchers run on this machine,
# where the endpoint 127.0.0.1 is local to each, so the first to bind hosts the rendezvous (torchrun: its TCPStore;
# taehv-run: its node group, as node 0) and the other joins it. Which launcher becomes which node is a race under
# both (the files are per RANK, so that is no difference), so the node ranks are also checked as a set: {0, 1}, and
# RANK = GROUP_RANK * 2 + LOCAL_RANK in every worker.
C10D_TWO_NODES = (
    "elastic quickstart, 2 nodes, c10d without --node-rank", "PyTorch elastic quickstart (docs.pytorch.org/docs/"
    "stable/elastic/quickstart.html): torchrun --nnodes=$NUM_NODES --nproc-per-node=$NUM_TRAINERS --max-restarts=3 "
    "--rdzv-id=$JOB_ID --rdzv-backend=c10d --rdzv-endpoint=$HOST_NODE_ADDR YOUR_TRAINING_SCRIPT.py, run on two "
    "nodes (here two launchers on one machine, endpoint 127.0.0.1)",
    ["--nnodes=2", "--nproc-per-node=2", "--max-restarts=3", "--rdzv-id=job35c", "--rdzv-backend=c10d",
     "--rdzv-endpoint=127.0.0.1:{port}", "train.py"],
    {"MASTER_ADDR": "c10d (see multinode)", "MASTER_PORT": "c10d (see multinode)"})


def run_nodes(launcher, words, folder, nodes, wrap=lambda node: []):
    """Runs `nodes` launchers at once, node i's argv `wrap(i)` + the launcher + `words` ({rank}: i); their exit codes,
    stderr, every worker's probe and the seconds it took."""
    out, base, env = prepare(launcher, folder, {})
    start = time.monotonic()
    procs = [subprocess.Popen(wrap(i) + base + [w.replace("{rank}", str(i)) for w in words], cwd=folder, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(nodes)]
    codes, errs = [], []
    for p in procs:
        try:
            _, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        codes.append(p.returncode)
        errs.append(err)
    return codes, errs, probes(out), time.monotonic() - start


def exit_problems(who, codes, errs, results):
    """Every launcher of a multi-node run exited 0 and some worker wrote its probe; else what each said last."""
    if all(c == 0 for c in codes) and results:
        return []
    return [f"{who} exits {codes}: " + " ".join(e[-300:] for e in errs)]


def group_ranks_problems(who, results, nodes, nproc):
    """Every rank once, every node rank once, RANK = GROUP_RANK * nproc + LOCAL_RANK, each worker's sizes right."""
    problems = []
    ranks = sorted(int(r["env"]["RANK"]) for r in results.values())
    groups = sorted({int(r["env"]["GROUP_RANK"]) for r in results.values()})
    if ranks != list(range(nodes * nproc)):
        problems.append(f"{who}: ranks {ranks}")
    if groups != list(range(nodes)):
        problems.append(f"{who}: group ranks {groups}")
    for name, r in results.items():
        e = r["env"]
        if int(e["RANK"]) != int(e["GROUP_RANK"]) * nproc + int(e["LOCAL_RANK"]) or e["GROUP_WORLD_SIZE"] != str(nodes):
            problems.append(f"{who} {name}: RANK {e['RANK']}, GROUP_RANK {e['GROUP_RANK']}, LOCAL_RANK "
                            f"{e['LOCAL_RANK']}, GROUP_WORLD_SIZE {e['GROUP_WORLD_SIZE']}")
    return problems


def run_c10d_two_nodes():
    name, source, words, own = C10D_TWO_NODES
    folder = tempfile.mkdtemp(prefix="taehv35c-")
    try:
        make_workers(folder, {"train.py": "script"})
        line = [w.replace("{port}", str(free_port())) for w in words]
        tcodes, terrs, tres, ttook = run_nodes("torchrun", line, folder, 2)
        line = [w.replace(w.rsplit(":", 1)[-1], str(free_port())) if w.startswith("--rdzv-endpoint") else w
                for w in line]  # a fresh port: torchrun's store may linger in TIME_WAIT
        hcodes, herrs, hres, htook = run_nodes("taehv-run", line, folder, 2)
        problems = exit_problems("torchrun", tcodes, terrs, tres) + exit_problems("taehv-run", hcodes, herrs, hres)
        if not problems:
            problems = (group_ranks_problems("torchrun", tres, 2, 2) + group_ranks_problems("taehv-run", hres, 2, 2) +
                        compare(name, line, tres, hres, own, folder))
        return report(f"{name}: {len(hres)} workers on 2 launchers, torchrun {ttook:.2f} s, taehv-run {htook:.2f} s",
                      source, problems)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# Bad input: taehv-run's one line and exit 2, and no worker started.
BAD = [
    ("a script that does not exist", ["--nproc-per-node", "2", "missing_train.py"], "does not exist"),
    ("a module that does not import", ["--nproc-per-node", "2", "-m", "no_such_module_35"], "no such module"),
    ("--nproc-per-node 0", ["--nproc-per-node", "0", "train.py"], "at least 1"),
    ("--rdzv-endpoint without a host", ["--rdzv-backend", "c10d", "--rdzv-endpoint", ":29400", "train.py"],
     "no host name"),
    ("--rdzv-conf garbage", ["--rdzv-conf", "garbage", "train.py"], "is not key=value"),
    ("--rdzv-conf bad timeout", ["--rdzv-conf", "join_timeout=soon", "train.py"], "whole seconds"),
    ("static endpoint without a port", ["--rdzv-endpoint", "node0", "train.py"], "has no port"),
    ("etcd rendezvous, no etcd there", ["--nnodes", "2", "--node-rank", "0", "--rdzv-backend", "etcd",
                                        "--rdzv-endpoint", "127.0.0.1:1", "train.py"], "cannot reach etcd at 127.0.0.1:1"),
    ("--no-python with -m", ["--no-python", "-m", "train"], "cannot be used together"),
    ("--start-method bogus", ["--start-method", "thread", "train.py"], "spawn, fork or forkserver"),
    ("--logs-specs", ["--logs-specs", "mine", "train.py"], "--logs-specs"),
]


def run_bad():
    failures = 0
    folder = tempfile.mkdtemp(prefix="taehv35-bad-")
    try:
        make_workers(folder, {"train.py": "script"})
        for name, words, expect in BAD:
            p, res, _ = run("taehv-run", words, folder, {})
            lines = [l for l in p.stderr.splitlines() if l.strip()]
            ok = p.returncode == 2 and len(lines) == 1 and expect in lines[0] and not res
            print(f"{'ok  ' if ok else 'FAIL'} bad input, {name}: exit {p.returncode}: {' | '.join(lines)}")
            failures += not ok
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return failures


# A failing worker: torchrun exits 1 (ChildFailedError out of its @record main) whatever the worker's code; so does
# taehv-run in torchrun's form (with `--` it keeps the worker's own code).
FAILING = "import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n"


def run_failing():
    folder = tempfile.mkdtemp(prefix="taehv35-fail-")
    try:
        with open(os.path.join(folder, "fails.py"), "w") as f:
            f.write(FAILING)
        words = ["--standalone", "--nproc-per-node", "2", "fails.py"]
        codes = {launcher: run(launcher, words, folder, {})[0].returncode for launcher in ("torchrun", "taehv-run")}
        own = run("taehv-run", words[:-1] + ["--", PYTHON, "fails.py"], folder, {})[0].returncode
        ok = codes["torchrun"] == 1 and codes["taehv-run"] == 1 and own == 3
        print(f"{'ok  ' if ok else 'FAIL'} a worker exiting 3: torchrun exit {codes['torchrun']}, taehv-run exit "
              f"{codes['taehv-run']} (torchrun's form), {own} with --")
        return int(not ok)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    start = time.monotonic()
    failed = run_cases() + run_c10d_two_nodes() + run_bad() + run_failing()
    print(f"{len(CASES) + 1} command lines, {len(BAD)} bad inputs, {failed} failed, {time.monotonic() - start:.1f} s")
    sys.exit(1 if failed else 0)
