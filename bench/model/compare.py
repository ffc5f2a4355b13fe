#!/usr/bin/env python3
"""`taehv-train bench` side by side with the plain PyTorch loop (train_loop_py.py, run by this Python: the
project's .venv with torch 2.13, the libtorch taehv-train links), in eager mode and, with --compile, under
torch.compile (inductor):
same model, objective (MSE of decode(encode(x)) vs the aligned input frames), optimizer (AdamW lr 3e-4,
betas (0.9, 0.95), wd 1e-2), batch and thread count, in one run. Runs are interleaved (C++, Python, Python, C++,
...) so that load from other processes hits all alike; prints medians, spread and the ratio python/c++ of wall
time and of CPU seconds per step (CPU time is the steadier figure on a shared machine), with the load average.

With --upstream PATH the Python loop also runs on upstream's own taehv.py (madebyollin/taehv, a copy at PATH: get it
with `git clone https://github.com/madebyollin/taehv`; nothing of it is in this repository), and each ratio is
printed against both baselines: "eager"/"compiled" = our port (taehv_py.py), "upstream"/"upstream-compiled" =
upstream's code, the loop a user would otherwise run.

usage: .venv/bin/python bench/model/compare.py [--taehv-train BUILD/bin/taehv-train] [--rounds 5] [--compile]
       [--omp-passive] [--config B,T,S,STEPS ...] [--upstream PATH/taehv.py] [--precision fp32|bf16]
Targets (issue 40, against upstream's code): >= 1.15x eager and >= 1.1x compiled at 2 x 12 x 64x64, >= 1.5x eager
at 1 x 4 x 32x32; against the port (issue 2): >= 1.15x eager and >= 1.0x compiled at 2 x 12 x 64x64, >= 1.5x eager at
1 x 4 x 32x32; 2 threads; peak RSS not above Python's."""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TARGETS = {("eager", 2, 12, 64): 1.15, ("eager", 1, 4, 32): 1.5, ("compiled", 2, 12, 64): 1.0,
           ("upstream", 2, 12, 64): 1.15, ("upstream", 1, 4, 32): 1.5, ("upstream-compiled", 2, 12, 64): 1.1}


def parse(output):
    values = {}
    for line in output.splitlines():
        for item in line.split():
            if "=" in item:
                key, _, value = item.partition("=")
                try:
                    values[key] = float(value)
                except ValueError:
                    pass
    return values


def run(cmd, env):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return parse(proc.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--taehv-train", default=os.path.join(ROOT, "build", "bin", "taehv-train"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--omp-passive", action="store_true",
                    help="OMP_WAIT_POLICY=PASSIVE for both sides (on an oversubscribed machine spinning OpenMP "
                         "threads slow both down by large, random factors)")
    ap.add_argument("--config", action="append", help="B,T,S,STEPS (default: 2,12,64,3 and 1,4,32,20)")
    ap.add_argument("--cpp-args", default="", help="extra arguments for taehv-train bench")
    ap.add_argument("--compile", action="store_true", help="also the Python loop under torch.compile (inductor)")
    ap.add_argument("--upstream", help="upstream taehv.py: also the Python loop over upstream's own model")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: autocast on both sides (taehv-train bench --precision bf16, torch.autocast); the "
                         "C++ side in taehv-train's layout (channels_last), the Python loop contiguous, as upstream's "
                         "code runs")
    a = ap.parse_args()
    if a.upstream and not os.path.isfile(a.upstream):
        sys.exit(f"--upstream {a.upstream}: no such file; get upstream's taehv.py with "
                 "`git clone https://github.com/madebyollin/taehv` and pass PATH/taehv.py")
    configs = [tuple(int(v) for v in c.split(",")) for c in (a.config or ["2,12,64,3", "1,4,32,20"])]
    if not os.access(a.taehv_train, os.X_OK):
        sys.exit(f"no taehv-train at {a.taehv_train}: build it (cmake --build BUILD --target taehv-train) "
                 "or pass --taehv-train PATH")
    env = dict(os.environ)
    if a.omp_passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    print(f"machine: {os.cpu_count()} CPUs, load average before: {os.getloadavg()}, "
          f"OMP_WAIT_POLICY={env.get('OMP_WAIT_POLICY', '(unset)')}, threads={a.threads}", flush=True)
    for batch, frames, size, steps in configs:
        common = ["--batch", str(batch), "--frames", str(frames), "--size", str(size), "--steps", str(steps),
                  "--warmup", "2", "--threads", str(a.threads), "--precision", a.precision]
        cpp_cmd = [a.taehv_train, "bench", "--variant", "taehv", *common, *a.cpp_args.split()]
        py_cmd = [sys.executable, os.path.join(HERE, "train_loop_py.py"), "--variant", "taehv", *common]
        sides = [("c++", cpp_cmd), ("eager", py_cmd)]
        if a.upstream:
            sides.append(("upstream", [*py_cmd, "--upstream", a.upstream]))
        if a.compile:  # inductor compiles during the warm-up steps: give it two
            sides.append(("compiled", [*py_cmd, "--compile"]))
            if a.upstream:
                sides.append(("upstream-compiled", [*py_cmd, "--upstream", a.upstream, "--compile"]))
        results = {name: [] for name, _ in sides}
        for r in range(a.rounds):
            for name, cmd in (sides if r % 2 == 0 else sides[::-1]):
                results[name].append(run(cmd, env))
                v = results[name][-1]
                print(f"  {batch}x{frames}x{size}x{size} round {r} {name:17s}: step_s={v['step_s']:.4f} "
                      f"cpu_s_per_step={v['cpu_s_per_step']:.4f} peak_rss_mb={v['peak_rss_mb']:.0f}", flush=True)
        keys = ("step_s", "cpu_s_per_step", "peak_rss_mb", "frames_per_s")
        med = {n: {k: statistics.median(v[k] for v in rs) for k in keys} for n, rs in results.items()}
        print(f"{batch}x{frames}x{size}x{size} {a.precision} {a.threads} threads (median of {a.rounds}, min-max):")
        for n, rs in results.items():
            m = med[n]
            steps_s = [v["step_s"] for v in rs]
            print(f"  {n:17s} step_s={m['step_s']:.4f} ({min(steps_s):.4f}-{max(steps_s):.4f}) "
                  f"frames_per_s={m['frames_per_s']:.2f} cpu_s_per_step={m['cpu_s_per_step']:.4f} "
                  f"peak_rss_mb={m['peak_rss_mb']:.0f}")
        for n in results:
            if n == "c++":
                continue
            wall_ratio = med[n]["step_s"] / med["c++"]["step_s"]
            cpu_ratio = med[n]["cpu_s_per_step"] / med["c++"]["cpu_s_per_step"]
            target = TARGETS.get((n, batch, frames, size))
            base = "upstream's taehv.py" if n.startswith("upstream") else "our port taehv_py.py"
            print(f"  ratio {n}/c++ (baseline: {base}): wall {wall_ratio:.3f}x, cpu {cpu_ratio:.3f}x"
                  + (f" (target {target}x)" if target else ""), flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
