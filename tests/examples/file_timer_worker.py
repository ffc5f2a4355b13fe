"""A Python DDP worker (Gloo) for tests/examples/file_timer_test.sh, using torchelastic's own timer API unchanged.

Usage: file_timer_worker.py OVERRUN_STEP GARBAGE. Each of 6 steps runs under timer.expires(after=2) on rank 1 and
after=30 on rank 0 (which may wait for rank 1 in the all-reduce); rank 1 sleeps 60 s inside step OVERRUN_STEP
(-1: never); with GARBAGE=1 rank 0 first writes a line that is not a request to the
timer's pipe."""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic import timer


def main():
    overrun_step, garbage = int(sys.argv[1]), sys.argv[2] == "1"
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    path = os.environ["TORCHELASTIC_TIMER_FILE"]
    timer.configure(timer.FileTimerClient(path))
    if garbage and rank == 0:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"not a request\n")
        os.close(fd)
    t = torch.ones(1)
    for step in range(6):
        with timer.expires(after=2 if rank == 1 else 30, scope="step"):
            if rank == 1 and step == overrun_step:
                time.sleep(60)
            dist.all_reduce(t)
    print(f"rank {rank} finished, sum {t.item():.0f}", flush=True)
    dist.destroy_process_group()


main()
