"""The worker of the resilience benchmark, the same under torchrun and taehv-run: a small DistributedDataParallel
loop over Gloo (a 3-layer MLP, a fixed 0.2 s of CPU work per step), a checkpoint every CKPT_EVERY steps that a
restarted attempt resumes from, progress reported over TAEHV_PROGRESS_SOCKET when taehv-run names one (a no-op
under torchrun). Prints, flushed, with wall-clock times (time.time(), the same clock in every network namespace):
  PID <rank> <pid> <attempt>          once per attempt
  STEP <step> <attempt> <t>           rank 0, after each step
  FAULT hang <rank> <t>               the hung rank, just before it blocks for good
Arguments: STEPS CKPT_DIR. Fault hook: BENCH_HANG_AT_STEP=N with BENCH_HANG_RANK=R blocks rank R's main thread
before step N of the first attempt (TORCHELASTIC_RESTART_COUNT 0); its process and Gloo threads live."""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

try:
    from taehv_progress import report
except ImportError:  # PYTHONPATH without examples/progress
    def report(step, section):
        pass

STEP_CPU_S = 0.2
CKPT_EVERY = 5


def main():
    steps, ckpt_dir = int(sys.argv[1]), sys.argv[2]
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.set_num_threads(1)
    report(0, "startup")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"PID {rank} {os.getpid()} {attempt}", flush=True)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                                        torch.nn.Linear(256, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    path = os.path.join(ckpt_dir, "latest.pt")
    start = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        start = state["step"]
    hang_at = int(os.environ.get("BENCH_HANG_AT_STEP", "-1"))
    hang_rank = int(os.environ.get("BENCH_HANG_RANK", "-1"))
    x = torch.randn(64, 256)
    for step in range(start, steps):
        report(step, "data")
        if attempt == 0 and step == hang_at and rank == hang_rank:
            print(f"FAULT hang {rank} {time.time():.3f}", flush=True)
            while True:
                time.sleep(3600)
        report(step, "forward_backward")
        end = time.process_time() + STEP_CPU_S
        while time.process_time() < end:
            pass
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()  # DDP's all-reduce
        report(step, "optimizer")
        opt.step()
        if rank == 0:
            print(f"STEP {step + 1} {attempt} {time.time():.3f}", flush=True)
            if (step + 1) % CKPT_EVERY == 0:
                report(step, "checkpoint")
                torch.save({"model": model.module.state_dict(), "step": step + 1}, path + ".tmp")
                os.replace(path + ".tmp", path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
