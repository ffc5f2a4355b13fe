"""The Python baseline of `taehv-train bench`: the same model (taehv_py.TAEHV), objective (MSE of
decode(encode(x)) against the aligned input frames: decoded frame j vs input frame j), optimizer (AdamW lr 3e-4,
betas (0.9, 0.95), weight decay 1e-2), batch and thread count, in a plain PyTorch loop. Prints per-step times and
a last line `frames_per_s=X step_s=Y peak_rss_mb=Z` like the C++ bench (with `peak_gpu_mb=M`, torch's
max_memory_allocated, on --device cuda). --compile runs the same step under torch.compile (inductor; on the CPU it
generates and compiles C++ with g++ during the warm-up steps, which are not timed). --precision bf16 runs the forward
under bf16 autocast and the loss in fp32, as `taehv-train bench --precision bf16` does. --upstream PATH trains
upstream's own TAEHV (madebyollin/taehv's taehv.py at PATH, `encode_video` / `decode_video` with parallel=True) instead
of the port in taehv_py.py: the baseline a user would otherwise run."""
import argparse
import contextlib
import resource
import time

import torch
import torch.nn.functional as F

from taehv_py import TAEHV
from upstream_import import load_upstream

VARIANTS = {"taehv": (1, 16), "taew2_1": (1, 16), "taecvx": (1, 16), "taeos1_3": (1, 16), "taehv1_5": (2, 32),
            "taew2_2": (2, 48)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="taehv", choices=sorted(VARIANTS))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward and loss (inductor)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last"],
                    help="channels_last: the model's 4-d weights in NHWC, so convolutions run and return NHWC")
    ap.add_argument("--upstream", help="upstream taehv.py (a clone of madebyollin/taehv): train its TAEHV instead")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("train_loop_py: --device cuda, but torch.cuda.is_available() is false")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    p, z = VARIANTS[a.variant]
    if a.upstream:
        if a.variant != "taehv":
            raise SystemExit("train_loop_py: --upstream builds the taehv variant only (checkpoint_path=None)")
        model = load_upstream(a.upstream).TAEHV(checkpoint_path=None).train().to(a.device)
        encode = lambda v: model.encode_video(v, parallel=True, show_progress_bar=False)  # noqa: E731
        decode = lambda v: model.decode_video(v, parallel=True, show_progress_bar=False)  # noqa: E731
    else:
        model = TAEHV(patch_size=p, latent_channels=z).train().to(a.device)
        encode, decode = model.encode_video, model.decode_video
    if a.memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=1e-2)
    x = torch.rand(a.batch, a.frames, 3, a.size, a.size).to(a.device)
    latents = -(-a.frames // model.t_downscale)
    aligned = min(4 * latents - model.frames_to_trim, a.frames)
    target = x[:, :aligned]
    print(f"python bench: torch {torch.__version__} threads={torch.get_num_threads()} "
          f"params={sum(q.numel() for q in model.parameters())} compile={a.compile} device={a.device} "
          f"precision={a.precision} memory_format={a.memory_format} model={a.upstream or 'taehv_py'}", flush=True)

    def objective(x):
        autocast = (torch.autocast(a.device, dtype=torch.bfloat16) if a.precision == "bf16"
                    else contextlib.nullcontext())
        with autocast:
            y = decode(encode(x))[:, :aligned]
        return F.mse_loss(y.float(), target)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if a.compile:
        objective = torch.compile(objective)
    timed = 0.0
    before = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            before = resource.getrusage(resource.RUSAGE_SELF)
        sync()
        start = time.perf_counter()
        loss = objective(x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()
        seconds = time.perf_counter() - start
        if step >= a.warmup:
            timed += seconds
        print(f"step {step}{' (warmup)' if step < a.warmup else ''}: {seconds:.3f} s loss {loss.item():.6f}",
              flush=True)
    step_s = timed / a.steps
    after = resource.getrusage(resource.RUSAGE_SELF)
    rss = after.ru_maxrss / 1024
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / a.steps
    print(f"cpu_s_per_step={cpu:.4f} minor_faults_per_step={(after.ru_minflt - before.ru_minflt) / a.steps:.0f}")
    gpu = f" peak_gpu_mb={torch.cuda.max_memory_allocated() / 2**20:.1f}" if cuda else ""
    print(f"frames_per_s={a.batch * a.frames / step_s:.3f} step_s={step_s:.4f} peak_rss_mb={rss:.1f}{gpu}")


if __name__ == "__main__":
    main()
