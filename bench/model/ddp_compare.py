"""Two processes on one machine, total frames/s: `taehv-run --standalone --nproc-per-node 2 -- taehv-train` against
`torchrun --standalone --nproc_per_node 2 train_ddp_py.py` (PyTorch DDP over Gloo, the same model, objective,
optimizer, clips per rank and threads per rank). Rounds are interleaved; each side's figure is the median step time
of the timed steps (after warm-up) of rank 0, turned into frames of all ranks per second.

usage: .venv/bin/python bench/model/ddp_compare.py [--build build] [--rounds 3] [--steps 12] [--warmup 3]
Target (issue 11): taehv-run + taehv-train >= 1.15x the torchrun + DDP pair at 2 x 12 x 64x64 per rank."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd, env):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2, help="clips per rank")
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--size", type=int, default=64)
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    total = a.steps + a.warmup
    results = {"taehv-run": [], "torchrun": []}
    print(f"machine: {os.cpu_count()} CPUs, load average before: {os.getloadavg()}; 2 ranks x 1 thread, "
          f"{a.batch} x {a.frames} x {a.size}x{a.size} per rank, {a.warmup} warm-up + {a.steps} timed steps", flush=True)
    for r in range(a.rounds):
        for side in (["taehv-run", "torchrun"] if r % 2 == 0 else ["torchrun", "taehv-run"]):
            if side == "taehv-run":
                with tempfile.TemporaryDirectory() as out:
                    run([os.path.join(a.build, "bin", "taehv-run"), "--standalone", "--nproc-per-node", "2", "--",
                         os.path.join(a.build, "bin", "taehv-train"), "--set", f"train.steps={total}",
                         "--set", f"train.batch_per_rank={a.batch}", "--set", f"data.frames={a.frames}",
                         "--set", f"data.size={a.size}", "--set", "train.threads=1", "--set", "train.device=cpu",
                         "--set", "train.bf16=false", "--set", "log.every=1", "--set", "log.preview_every=0",
                         "--set", "log.tensorboard=false", "--set", "checkpoint.every=0",
                         "--set", "checkpoint.export_safetensors=false", "--set", f"output.dir={out}"], env)
                    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
                step_s = statistics.median(row["step_s"] for row in rows if row["step"] > a.warmup)
            else:
                out = run([os.path.join(os.path.dirname(sys.executable), "torchrun"), "--standalone",
                           "--nproc_per_node", "2", os.path.join(HERE, "train_ddp_py.py"), "--batch", str(a.batch),
                           "--frames", str(a.frames), "--size", str(a.size), "--steps", str(a.steps),
                           "--warmup", str(a.warmup), "--threads", "1"], env)
                times = [float(line.split()[2]) for line in out.splitlines()
                         if line.startswith("step ") and "(warmup)" not in line]
                step_s = statistics.median(times)
            fps = 2 * a.batch * a.frames / step_s
            results[side].append(fps)
            print(f"  round {r} {side:9s}: median step {step_s:.3f} s, {fps:.2f} frames/s", flush=True)
    med = {side: statistics.median(v) for side, v in results.items()}
    spread = {side: (min(v), max(v)) for side, v in results.items()}
    for side in results:
        print(f"{side:9s} median {med[side]:.2f} frames/s (min {spread[side][0]:.2f}, max {spread[side][1]:.2f})")
    print(f"ratio taehv-run/torchrun: {med['taehv-run'] / med['torchrun']:.3f}x (target 1.15x); "
          f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
