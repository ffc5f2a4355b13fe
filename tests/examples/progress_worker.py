"""A Python worker for tests/examples/progress_test.sh: reports each step through examples/progress/taehv_progress.py.

Usage: progress_worker.py STEPS HANG_AT GARBAGE. Rank 1 blocks for good in wait_forever_in_data at step HANG_AT
(-1: never); with GARBAGE=1 rank 0 also sends a malformed datagram on the channel every step."""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "progress"))
from taehv_progress import report  # noqa: E402


def wait_forever_in_data():
    while True:
        time.sleep(1)


def main():
    steps, hang_at, garbage = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
    rank = int(os.environ["RANK"])
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    report(0, "startup")
    for step in range(steps):
        report(step, "data")
        if rank == 1 and step == hang_at:
            wait_forever_in_data()
        time.sleep(0.05)
        report(step, "forward_backward")
        time.sleep(0.1)
        if garbage and rank == 0:
            raw.sendto(b"\x00step=oops section=nowhere", os.environ["TAEHV_PROGRESS_SOCKET"])
    print(f"rank {rank} finished {steps} steps", flush=True)


main()
