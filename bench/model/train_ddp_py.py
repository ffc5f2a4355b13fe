"""The PyTorch side of the 2-process comparison: what a user would run instead of taehv-run + taehv-train, i.e.
`torchrun --standalone --nproc_per_node 2 train_ddp_py.py`: the same model (taehv_py.TAEHV) wrapped in
DistributedDataParallel over Gloo, the same objective and optimizer as train_loop_py.py, a new random batch per
step (generated in the loop, as cheap as data gets). Rank 0 prints per-step times and a last line
`frames_per_s=X step_s=Y peak_rss_mb=Z` with X the frames of all ranks per second."""
import argparse
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from taehv_py import TAEHV


class Roundtrip(torch.nn.Module):
    """decode(encode(x)) as one forward, so that DDP's forward (which arms its gradient all-reduce) covers it."""

    def __init__(self):
        super().__init__()
        self.taehv = TAEHV()

    def forward(self, x):
        return self.taehv.decode_video(self.taehv.encode_video(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=2, help="clips per rank")
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(Roundtrip().train())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=1e-2)
    inner = model.module.taehv
    latents = -(-a.frames // inner.t_downscale)
    aligned = min(4 * latents - inner.frames_to_trim, a.frames)
    generator = torch.Generator().manual_seed(rank)
    timed = 0.0
    for step in range(a.warmup + a.steps):
        dist.barrier()
        start = time.perf_counter()
        x = torch.rand(a.batch, a.frames, 3, a.size, a.size, generator=generator)
        y = model(x)[:, :aligned]
        loss = F.mse_loss(y, x[:, :aligned])
        opt.zero_grad()
        loss.backward()
        opt.step()
        seconds = time.perf_counter() - start
        if step >= a.warmup:
            timed += seconds
        if rank == 0:
            print(f"step {step}{' (warmup)' if step < a.warmup else ''}: {seconds:.3f} s loss {loss.item():.6f}",
                  flush=True)
    step_s = timed / a.steps
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if rank == 0:
        print(f"frames_per_s={world * a.batch * a.frames / step_s:.3f} step_s={step_s:.4f} peak_rss_mb={rss:.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
