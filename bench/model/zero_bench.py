#!/usr/bin/env python3
"""ZeRO stages 0/1/2 (train.zero_stage) at 1 and 2 ranks: optimizer-step time, whole-step time, peak RSS per rank.

Starts real taehv-train ranks the way taehv-run does (RANK, WORLD_SIZE, MASTER_* in the environment; Gloo over
loopback), reads rank 0's metrics.jsonl (step_s; optimizer_s: everything after the last backward; update_s: the AdamW
arithmetic alone, what ZeRO divides by the world size) and takes each
rank's peak RSS (VmHWM before the end-of-run checkpoint, and wait4()'s including it). Prints a Markdown table of medians over the timed steps (the first `--warmup` steps
are dropped). Run: .venv/bin/python bench/model/zero_bench.py [--taehv-train build/bin/taehv-train]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time

CONFIGS = {"1x4x32x32": (1, 4, 32), "2x12x64x64": (2, 12, 64)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(binary, world, stage, batch, frames, size, steps, threads, out):
    port = free_port()
    args = [binary, "--set", f"data.size={size}", "--set", f"data.frames={frames}", "--set",
            f"train.batch_per_rank={batch}", "--set", f"train.steps={steps}", "--set", f"train.threads={threads}",
            "--set", f"train.zero_stage={stage}", "--set", "log.every=1", "--set", "log.preview_every=0",
            "--set", "log.tensorboard=false", "--set", "checkpoint.every=0", "--set",
            "checkpoint.export_safetensors=false", "--set", f"output.dir={out}"]
    procs = []
    for rank in range(world):
        env = dict(os.environ)
        if world > 1:
            env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        log = open(f"{out}.rank{rank}.log", "w")
        procs.append(subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT))
    # Peak RSS of the training steps: VmHWM of each rank once rank 0 has logged step `steps - 1`, before the
    # end-of-run checkpoint (which gathers the full AdamW state on rank 0) and the last step.
    metrics = os.path.join(out, "metrics.jsonl")
    train_rss = None
    while train_rss is None and all(p.poll() is None for p in procs):
        try:
            with open(metrics) as f:
                logged = sum(1 for line in f if line.strip())
        except FileNotFoundError:
            logged = 0
        if logged >= steps - 1:
            train_rss = [vm_hwm_mib(p.pid) for p in procs]
        time.sleep(0.01)
    rss = []
    for p in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise SystemExit(f"taehv-train failed ({p.returncode}): see {out}.rank*.log")
        rss.append(usage.ru_maxrss / 1024)  # KiB -> MiB
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    return rows, train_rss or [float("nan")] * world, rss


def vm_hwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--taehv-train", default="build/bin/taehv-train")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--worlds", default="1,2")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    print("| config | ranks | stage | update_s | optimizer_s | step_s | peak RSS per rank, steps (MiB) | "
          "with final save (MiB) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="taehv-zero-bench-") as tmp:
        for name in args.configs.split(","):
            batch, frames, size = CONFIGS[name]
            for world in map(int, args.worlds.split(",")):
                for stage in (0, 1, 2):
                    out = os.path.join(tmp, f"{name}-w{world}-s{stage}")
                    rows, train_rss, rss = run(args.taehv_train, world, stage, batch, frames, size, args.steps, args.threads,
                                    out)
                    timed = rows[args.warmup:]
                    upd = statistics.median(r["update_s"] for r in timed)
                    opt = statistics.median(r["optimizer_s"] for r in timed)
                    step = statistics.median(r["step_s"] for r in timed)
                    opt_rng = f"{min(r['optimizer_s'] for r in timed):.3f}-{max(r['optimizer_s'] for r in timed):.3f}"
                    step_rng = f"{min(r['step_s'] for r in timed):.3f}-{max(r['step_s'] for r in timed):.3f}"
                    upd_rng = f"{min(r['update_s'] for r in timed):.4f}-{max(r['update_s'] for r in timed):.4f}"
                    print(f"| {name} | {world} | {stage} | {upd:.4f} ({upd_rng}) | {opt:.4f} ({opt_rng}) | "
                          f"{step:.3f} ({step_rng}) | "
                          f"{' / '.join(f'{r:.0f}' for r in train_rss)} | {' / '.join(f'{r:.0f}' for r in rss)} |",
                          flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
