"""Issue 40: the convolution FLOPs `taehv-train bench` counts from the layers' own sizes (countStepFlops) equal
torch.utils.flop_counter.FlopCounterMode's count over the Python port (bench/model/taehv_py.py, the same
architecture run as upstream runs it) for one training step (MSE of decode(encode(x)) against the aligned frames,
backward), at two shapes, exactly: forward = aten.convolution, backward = aten.convolution_backward (input and
weight gradients; none for the first convolution's input, the data). Neither side counts element-wise ops (ReLU,
tanh, upsample, the loss): flop_counter has no formula for them. Also checks that the layers ran fewer forward
FLOPs than that (each TGrow before its upsample, the 3 trimmed frames skipped) and that both shapes differ.

usage: python flop_count_test.py TAEHV_TRAIN"""
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "bench", "model"))
from taehv_py import TAEHV  # noqa: E402

# (batch, frames, size): a clip whose frames are a multiple of 4, and two clips padded in time (5 -> 8 frames).
SHAPES = [(1, 4, 32), (2, 5, 40)]


def python_counts(batch, frames, size):
    torch.manual_seed(0)
    model = TAEHV().train()
    x = torch.rand(batch, frames, 3, size, size)
    with FlopCounterMode(display=False) as counter:
        y = model.decode_video(model.encode_video(x))
        aligned = min(y.shape[1], frames)
        F.mse_loss(y[:, :aligned], x[:, :aligned]).backward()
    by_op = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    forward = by_op.pop("aten.convolution", 0)
    backward = by_op.pop("aten.convolution_backward", 0)
    return forward, backward, by_op


def cpp_counts(taehv_train, batch, frames, size):
    cmd = [taehv_train, "bench", "--batch", str(batch), "--frames", str(frames), "--size", str(size), "--steps", "1",
           "--warmup", "0", "--threads", "1", "--peak-tflops", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {out.returncode}\n{out.stdout}\n{out.stderr}")
    line = next((l for l in out.stdout.splitlines() if l.startswith("flops: ")), None)
    if line is None:
        sys.exit(f"FAIL: no 'flops:' line in the bench output:\n{out.stdout}")
    values = dict(item.split("=", 1) for item in line.split() if "=" in item)
    return int(values["model_forward"]), int(values["model_backward"]), float(values["executed_forward"])


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    torch.set_num_threads(1)
    failures = []
    totals = set()
    for batch, frames, size in SHAPES:
        py_fwd, py_bwd, others = python_counts(batch, frames, size)
        cpp_fwd, cpp_bwd, executed = cpp_counts(sys.argv[1], batch, frames, size)
        print(f"{batch}x{frames}x{size}x{size}: flop_counter forward {py_fwd} backward {py_bwd} (other ops: "
              f"{others or 'none'}); taehv-train forward {cpp_fwd} backward {cpp_bwd}, executed forward "
              f"{executed:.0f}")
        if (cpp_fwd, cpp_bwd) != (py_fwd, py_bwd):
            failures.append(f"{batch}x{frames}x{size}: C++ ({cpp_fwd}, {cpp_bwd}) != flop_counter ({py_fwd}, "
                            f"{py_bwd})")
        if others:
            failures.append(f"{batch}x{frames}x{size}: flop_counter counted ops besides convolutions: {others}")
        if not 0 < executed < cpp_fwd:
            failures.append(f"{batch}x{frames}x{size}: executed forward {executed:.0f} not below the model's "
                            f"{cpp_fwd}")
        totals.add(cpp_fwd + cpp_bwd)
    if len(totals) != len(SHAPES):
        failures.append("the two shapes gave the same count")
    for f in failures:
        print("FAIL:", f)
    print("flop count check:", "FAILED" if failures else "OK")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
