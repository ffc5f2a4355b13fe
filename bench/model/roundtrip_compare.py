#!/usr/bin/env python3
"""Encode and decode throughput of `taehv-train roundtrip` against upstream's Python `TAEHV.encode_video` /
`decode_video` (madebyollin/taehv taehv.py, loaded from the path given with --upstream: nothing of it is vendored
here) on the same torch (run this with the project's .venv/bin/python: torch 2.13, the libtorch taehv-train links),
the same weights, the same frames (a testsrc2 video made by ffmpeg), the same thread count, in both modes:
parallel (encode_video(parallel=True), taehv-train roundtrip) and streaming (parallel=False, roundtrip --streaming).

Each measurement is a fresh process that loads the model and times its first encode and first decode of the clip,
which is what a user of either tool gets; C++ and Python runs are interleaved so that load from other processes
hits both alike. Prints medians (min-max) of frames/s and the ratio C++ / Python with the load average.

usage: .venv/bin/python bench/model/roundtrip_compare.py --upstream PATH/taehv.py [--taehv-train BUILD/bin/taehv-train]
       [--weights W] [--size 256] [--frames 33] [--rounds 3] [--threads 2] [--omp-passive]
Target (issue 16): C++ not slower than Python in any mode."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from compare import parse, run  # noqa: E402  (key=value output parser, subprocess runner)
from upstream_import import load_upstream  # noqa: E402


def python_worker(a):
    """One measurement in this process: upstream TAEHV on the clip, frames/s of encode and decode."""
    import numpy as np
    import torch

    torch.set_num_threads(a.threads)
    upstream = load_upstream(a.upstream)
    from taehv_py import read_safetensors  # the project's plain safetensors reader (no safetensors package here)

    model = upstream.TAEHV(checkpoint_path=None)
    state = {k: v.float() for k, v in read_safetensors(a.weights).items()}
    model.load_state_dict(model.patch_tgrow_layers(state))
    model.eval()
    raw = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", a.video, "-f", "rawvideo", "-pix_fmt",
                          "rgb24", "-"], capture_output=True, check=True).stdout
    frames = np.frombuffer(raw, np.uint8).reshape(-1, a.size, a.size, 3)
    x = torch.from_numpy(frames.copy()).permute(0, 3, 1, 2).float().div(255).unsqueeze(0)
    parallel = a.mode == "parallel"
    with torch.inference_mode():
        start = time.perf_counter()
        z = model.encode_video(x, parallel=parallel, show_progress_bar=False)
        encode_s = time.perf_counter() - start
        start = time.perf_counter()
        y = model.decode_video(z, parallel=parallel, show_progress_bar=False)
        decode_s = time.perf_counter() - start
    n = x.shape[1]
    assert y.shape[1] >= n, f"decoded {y.shape[1]} frames of {n}"
    mse = (y[:, :n] - x).pow(2).mean().item()
    print(f"frames={n} encode_frames_per_s={n / encode_s:.3f} decode_frames_per_s={n / decode_s:.3f} "
          f"psnr_whole_db={-10 * np.log10(mse):.2f}")


def summary(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True, help="upstream taehv.py (e.g. from a clone of madebyollin/taehv)")
    ap.add_argument("--taehv-train", default=os.path.join(ROOT, "build", "bin", "taehv-train"))
    ap.add_argument("--weights", default=os.path.join(ROOT, "..", "shared", "taehv-reference", "taehv.f16.safetensors"))
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--frames", type=int, default=33, help="4k+1 frames: neither side pads")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="parallel,streaming")
    ap.add_argument("--omp-passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE for both sides")
    ap.add_argument("--worker", choices=["parallel", "streaming"], help=argparse.SUPPRESS)
    ap.add_argument("--video", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        a.mode = a.worker
        return python_worker(a)
    for path, what in ((a.upstream, "--upstream"), (a.weights, "--weights"), (a.taehv_train, "--taehv-train")):
        if not os.path.exists(path):
            sys.exit(f"{what}: {path} does not exist")
    env = dict(os.environ)
    if a.omp_passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    with tempfile.TemporaryDirectory() as tmp:
        video = os.path.join(tmp, "in.mp4")
        subprocess.run(["ffmpeg", "-nostdin", "-y", "-loglevel", "error", "-f", "lavfi", "-i",
                        f"testsrc2=size={a.size}x{a.size}:rate=24", "-frames:v", str(a.frames), "-c:v", "libx264",
                        "-crf", "12", "-pix_fmt", "yuv420p", video], check=True)
        print(f"# {a.frames} frames {a.size}x{a.size}, {a.threads} threads, omp_passive={a.omp_passive}, "
              f"load before: {os.getloadavg()}")
        results = {}
        for mode in a.modes.split(","):
            cpp_cmd = [a.taehv_train, "roundtrip", "--variant", "taehv", "--weights", a.weights, "--input", video,
                       "--output", os.path.join(tmp, "out.mp4"), "--threads", str(a.threads)]
            if mode == "streaming":
                cpp_cmd.append("--streaming")
            py_cmd = [sys.executable, os.path.abspath(__file__), "--upstream", a.upstream, "--weights", a.weights,
                      "--size", str(a.size), "--threads", str(a.threads), "--worker", mode, "--video", video]
            for r in range(a.rounds):
                order = [("c++", cpp_cmd), ("python", py_cmd)]
                for side, cmd in order if r % 2 == 0 else reversed(order):
                    v = run(cmd, env)
                    for key in ("encode_frames_per_s", "decode_frames_per_s"):
                        results.setdefault((mode, side, key), []).append(v[key])
        print(f"# load after: {os.getloadavg()}")
        print("| mode | stage | taehv-train roundtrip frames/s | upstream Python frames/s | C++ / Python |")
        print("|---|---|---|---|---|")
        for mode in a.modes.split(","):
            for key, stage in (("encode_frames_per_s", "encode"), ("decode_frames_per_s", "decode")):
                cpp, py = results[(mode, "c++", key)], results[(mode, "python", key)]
                ratio = statistics.median(cpp) / statistics.median(py)
                print(f"| {mode} | {stage} | {summary(cpp)} | {summary(py)} | **{ratio:.2f}x** |")


if __name__ == "__main__":
    main()
