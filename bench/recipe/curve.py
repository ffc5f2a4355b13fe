"""Held-out PSNR against training wall time for the main job's recipe (examples/configs/quickstart.yaml) and
the candidates measured against it (RECIPES: the quickstart with overrides). Each runs as the main job does, 2 ranks
through taehv-run, with the held-out evaluation every --eval-every steps (eval.size 64, 12 frames, eval.clips 32: the
main job's clips). Training time at an evaluation is the run's wall time there minus the evaluations so far.
The final checkpoint is also evaluated on OLD_DATA's held-out clips (the quickstart's data before the easier scenes),
since a recipe that changes the scenes changes its own evaluation clips too.

The machine is shared, so wall times are inflated by whatever else runs. `--timing` instead runs --timing-steps steps
of each recipe while holding `flock /tmp/taehv-slow.lock` (others' timing runs hold it too) and prints the median step
time, which converts each curve's steps to the idle machine's wall time.

usage: .venv/bin/python bench/recipe/curve.py [--build build] [--recipes quickstart,before-19] [--out /tmp/taehv-recipe]
       .venv/bin/python bench/recipe/curve.py --timing [--timing-steps 25]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
QUICKSTART = os.path.join(ROOT, "examples", "configs", "quickstart.yaml")
# The quickstart of 11e1886: the output conv's init at 0.1 (the default), edge weight 16, zoomed crops (crop_min 0.6);
# every recipe measured before recipe 19f (2026-11-25, 06:00-) keeps them.
Q11E1886 = ["model.init_output_scale=0.1", "train.edge_weight=16", "data.crop_min=0.6"]
# The quickstart of 865c7ba: without the SSIM term; every recipe measured before it keeps that.
NO_SSIM = Q11E1886 + ["train.ssim_weight=0"]
# The quickstart of 2606340: fp32 steps, 1150 of them; every recipe measured before the bf16 CPU step keeps them.
FP32 = NO_SSIM + ["train.cpu_precision=fp32", "train.steps=1150"]
# The quickstart of 2544be2: MSE alone, without the edge term it has had since; every recipe measured before keeps it.
NO_EDGES = FP32 + ["train.edge_weight=0"]
# The quickstart of 67ff246 (1150 steps): cosine down to 0.1x and a frame stride of up to 2, the two keys the
# quickstart changed next (constant lr, stride 1); every recipe measured before them keeps them.
COSINE = ["train.min_lr_ratio=0.1"]
STRIDE2 = ["data.stride_max=2"]
Q67FF246 = NO_EDGES + COSINE + STRIDE2
# The quickstart of f283639 (whole 64x64 scenes, 2 clips per rank, 520 steps), on which the recipes measured before
# recipe-19c are overrides.
F283639 = Q67FF246 + ["data.size=64", "data.synthetic_scene_size=0", "train.batch_per_rank=2", "train.steps=520"]
# Training clips that are 32x32 (48x48) windows of 64-pixel scenes (data.synthetic_scene_size, recipe-19c).
CROP32 = Q67FF246 + ["data.size=32", "data.synthetic_scene_size=64"]
CROP48 = Q67FF246 + ["data.size=48", "data.synthetic_scene_size=64"]
RECIPES = {  # name -> --set overrides of the quickstart
    "quickstart": [],
    "quickstart-f283639": F283639,
    "before-19": F283639 + ["train.steps=300", "train.ema=0"],  # the quickstart as it was before issue 19's recipe
    "l1-520": F283639 + ["train.loss=l1", "train.steps=520", "train.ema=0"],  # L1, the steps of ~9.5 idle minutes
    # issue 19, 2026-11-24 (recipe-19b): the quickstart of 6984745 (stride up to 2, shapes at scale 1) and the
    # easier scenes measured against it: stride 1 (less motion), and shapes 1.5x larger on top
    "quickstart-6984745": F283639 + ["data.stride_max=2", "data.synthetic_shape_scale=1"],
    "stride1": F283639 + ["data.stride_max=1"],
    "stride1-scale1.5": F283639 + ["data.stride_max=1", "data.synthetic_shape_scale=1.5"],
    # 8-frame clips (0.74x the step): 350 steps take ~0.86x the idle time of before-19's 300 12-frame steps
    "stride1-f8-350": F283639 + ["data.stride_max=1", "data.frames=8", "train.steps=350"],
    # issue 19, 2026-11-24 (recipe-19c): training clips that are 32x32 (48x48) windows of 64-pixel scenes, the
    # evaluation's pixel scale (data.synthetic_scene_size), more clips or more steps in the same time
    "crop32-b2": CROP32 + ["train.batch_per_rank=2"],
    "crop32-b4": CROP32 + ["train.batch_per_rank=4"],
    "crop32-b8": CROP32 + ["train.batch_per_rank=8"],
    "crop48-b4": CROP48 + ["train.batch_per_rank=4"],
    # the steps that fit the quickstart's 520 steps' idle time (step costs in bench/recipe/RESULTS.md)
    "crop32-b4-900": CROP32 + ["train.batch_per_rank=4", "train.steps=900"],
    "crop32-b8-540": CROP32 + ["train.batch_per_rank=8", "train.steps=540"],
    "crop32-b2-1380": CROP32 + ["train.batch_per_rank=2", "train.steps=1380"],
    "crop48-b3-630": CROP48 + ["train.batch_per_rank=3", "train.steps=630"],
    "crop32-b4-900-seed1": CROP32 + ["train.batch_per_rank=4", "train.steps=900", "train.seed=1"],
    # issue 19, 2026-11-24 (16:04-): the 1150-step quickstart of 67ff246 and the learning rate's schedule on it,
    # then the constant lr with stride 1 (the quickstart since) and its variants
    "quickstart-67ff246": Q67FF246,
    "cosine-lr2e-4": Q67FF246 + ["train.lr=0.0002"],
    "cosine-lr5e-4": Q67FF246 + ["train.lr=0.0005"],
    "cosine-floor0.3": NO_EDGES + STRIDE2 + ["train.min_lr_ratio=0.3"],
    "cosine-floor0.5": NO_EDGES + STRIDE2 + ["train.min_lr_ratio=0.5"],
    "constant-stride2": NO_EDGES + STRIDE2,
    "constant-stride2-lr4e-4": NO_EDGES + STRIDE2 + ["train.lr=0.0004"],
    "quickstart-2544be2": NO_EDGES,
    "quickstart-2544be2-seed1": NO_EDGES + ["train.seed=1"],
    "quickstart-2544be2-ema0.99": NO_EDGES + ["train.ema=0.99"],
    # issue 19, 2026-11-24 (20:00-): the loss and the peak lr on the quickstart of 2544be2, then the edge term
    # (train.edge_weight; the quickstart's is 16) at other weights and a second seed
    "mse+l1": NO_EDGES + ["train.loss=mse+l1"],
    "lr2e-4": NO_EDGES + ["train.lr=0.0002"],
    "edges1": FP32 + ["train.edge_weight=1"],
    "edges4": FP32 + ["train.edge_weight=4"],
    "edges8": FP32 + ["train.edge_weight=8"],
    "edges32": FP32 + ["train.edge_weight=32"],
    "edges4-seed1": FP32 + ["train.edge_weight=4", "train.seed=1"],
    "quickstart-2606340-seed1": FP32 + ["train.seed=1"],
    "quickstart-2606340-seed2": FP32 + ["train.seed=2"],
    # issue 19, 2026-11-24 (23:30-): the CPU step under bf16 autocast (train.cpu_precision; the quickstart's is auto,
    # bf16 on this CPU), 1.5x faster, so 1700 steps fit where 1150 fp32 ones did; a cosine over the last steps
    "quickstart-2606340": FP32,
    "quickstart-865c7ba": NO_SSIM,
    "quickstart-865c7ba-seed1": NO_SSIM + ["train.seed=1"],
    "quickstart-865c7ba-seed2": NO_SSIM + ["train.seed=2"],
    "bf16-2500": NO_SSIM + ["train.steps=2500"],  # beyond the 10-minute budget: does more time alone sharpen the edges?
    # issue 19, 2026-11-25: an SSIM term (train.ssim_weight), from the first step or from step 800 (the quickstart)
    "edge24": NO_SSIM + ["train.edge_weight=24"],
    "ssim0.1": Q11E1886 + ["train.ssim_from_step=0"],
    "ssim0.1-seed1": Q11E1886 + ["train.ssim_from_step=0", "train.seed=1"],
    "ssim0.03": Q11E1886 + ["train.ssim_from_step=0", "train.ssim_weight=0.03"],
    "ssim0.3": Q11E1886 + ["train.ssim_from_step=0", "train.ssim_weight=0.3"],
    "quickstart-11e1886": Q11E1886,
    "quickstart-11e1886-seed1": Q11E1886 + ["train.seed=1"],
    "quickstart-11e1886-seed2": Q11E1886 + ["train.seed=2"],
    # 900 steps: does the plateau before the shapes (to ~step 750) end sooner?
    "probe-lr6e-4": Q11E1886 + ["train.lr=0.0006", "train.steps=900"],
    "probe-beta2-0.99": Q11E1886 + ["train.beta2=0.99", "train.steps=900"],
    # recipe 19f, 2026-11-25 (06:00-): the output conv's init scale (model.init_output_scale), then the edge share on it
    "probe-out1": Q11E1886 + ["model.init_output_scale=1", "train.steps=900"],
    "out1": Q11E1886 + ["model.init_output_scale=1"],
    "probe-out1-l1": Q11E1886 + ["model.init_output_scale=1", "train.steps=900", "train.loss=l1"],
    "probe-out1-msel1": Q11E1886 + ["model.init_output_scale=1", "train.steps=900", "train.loss=mse+l1"],
    "probe-out1-ssim0": Q11E1886 + ["model.init_output_scale=1", "train.steps=900", "train.ssim_from_step=0"],
    "probe-out1-edge32": Q11E1886 + ["model.init_output_scale=1", "train.steps=900", "train.edge_weight=32"],
    "probe-out1-crop1": Q11E1886 + ["model.init_output_scale=1", "train.steps=900", "data.crop_min=1"],
    "oec": ["train.edge_weight=32"],
    "oec-seed1": ["train.edge_weight=32", "train.seed=1"],
    "quickstart-seed1": ["train.seed=1"],
    "quickstart-seed2": ["train.seed=2"],
}


# The held-out data of the quickstart before the easier scenes (6984745): the recipes that change the scenes change
# their own evaluation clips too, so every final checkpoint is also evaluated on these.
OLD_DATA = ["data.synthetic_texture=false", "data.stride_max=2", "data.crop_min=0.6", "data.synthetic_shapes=5",
            "data.synthetic_shape_scale=1", "data.synthetic_flat_background=false", "data.frames=12", "data.size=64",
            "data.synthetic_scene_size=0"]


def evalOnOldData(build, out, clips):
    """(PSNR, SSIM) of the run's last checkpoint (its EMA weights) on OLD_DATA's held-out clips."""
    steps = sorted(int(d.split("-")[1]) for d in os.listdir(out) if d.startswith("checkpoint-"))
    cmd = [os.path.join(build, "bin", "taehv-train"), "eval", "--checkpoint",
           os.path.join(out, "checkpoint-%d" % steps[-1]), "--config", QUICKSTART, "--set", "eval.clips=%d" % clips]
    for s in OLD_DATA:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return steps[-1], result["psnr"], result["ssim"]


def run(build, config, out, sets, lock=False):
    cmd = [os.path.join(build, "bin", "taehv-run"), "--standalone", "--nproc-per-node", "2", "--",
           os.path.join(build, "bin", "taehv-train"), "--config", config, "--set", "output.dir=" + out]
    for s in sets:
        cmd += ["--set", s]
    if lock:
        cmd = ["flock", "/tmp/taehv-slow.lock"] + cmd
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
    return rows, time.time() - start


def curve(rows):
    """(step, training seconds, PSNR, SSIM, edge share) at each evaluation; training seconds exclude the
    evaluations."""
    points, eval_total = [], 0.0
    for r in rows:
        if "eval_psnr" in r:
            eval_total += r["eval_s"]
            points.append((r["step"], r["elapsed_s"] - eval_total, r["eval_psnr"], r["eval_ssim"],
                           r["eval_edge_share"]))
    return points


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--recipes", default="quickstart,before-19")
    ap.add_argument("--out", default="/tmp/taehv-recipe")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-clips", type=int, default=32)
    ap.add_argument("--timing", action="store_true", help="only time steps, holding /tmp/taehv-slow.lock")
    ap.add_argument("--timing-steps", type=int, default=25)
    a = ap.parse_args()
    # Recipes are measured in steps: the quickstart's 1700 of c761a13, without the time budget it has had since
    # (train.max_minutes 9.5, up to 3000 steps); a recipe's own train.steps comes after and wins.
    common = ["checkpoint.every=0", "checkpoint.export_safetensors=false", "train.max_minutes=0", "train.steps=1700"]
    for name in a.recipes.split(","):
        if name not in RECIPES:
            sys.exit(f"unknown recipe '{name}'; known: {', '.join(RECIPES)}")
        out = os.path.join(a.out, name + ("-timing" if a.timing else ""))
        subprocess.run(["rm", "-rf", out], check=True)
        load = os.getloadavg()[0]
        if a.timing:
            rows, _ = run(a.build, QUICKSTART, out,
                          common + RECIPES[name] + ["train.steps=%d" % a.timing_steps, "log.every=1",
                                                    "log.preview_every=0", "eval.every=0"], lock=True)
            steps = [r["step_s"] for r in rows if "step_s" in r and r["step"] > 5]  # after warm-up
            print(f"{name}: median step {statistics.median(steps):.3f} s over steps 6-{a.timing_steps} "
                  f"(min {min(steps):.3f}), load average before {load:.2f}, under flock")
            continue
        rows, wall = run(a.build, QUICKSTART, out,
                         common + RECIPES[name] + ["eval.every=%d" % a.eval_every, "eval.clips=%d" % a.eval_clips,
                                                   "eval.size=64", "eval.frames=12", "log.preview_every=0"])
        train_rows = [r for r in rows if "step_s" in r]
        print(f"\n{name}: {train_rows[-1]['step']} steps, {wall:.0f} s wall in all (load average before "
              f"{load:.2f}); median logged step {statistics.median(r['step_s'] for r in train_rows):.3f} s")
        print("| step | training s | held-out PSNR dB | SSIM | edge share |\n|---|---|---|---|---|")
        for step, seconds, psnr, ssim, edges in curve(rows):
            print(f"| {step} | {seconds:.0f} | {psnr:.2f} | {ssim:.4f} | {edges:.3f} |")
        step, psnr, ssim = evalOnOldData(a.build, out, a.eval_clips)
        print(f"step {step} on the held-out clips of 6984745's quickstart data: PSNR {psnr:.2f} dB, SSIM {ssim:.4f}")


if __name__ == "__main__":
    main()
