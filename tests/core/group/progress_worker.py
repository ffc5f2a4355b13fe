"""A worker for the node group's progress tests: reports steps over TAEHV_PROGRESS_SOCKET (taehv_progress.py) with
set times, no training. Arguments: STEPS BUSY_S EXCHANGE_S [stall_at=K | wait_at=K | fail_at=K | cpu=1].
  per step: data (BUSY_S/2), forward_backward (BUSY_S/2), exchange (EXCHANGE_S)
  stall_at=K: at step K, report data and go silent for good (a hung rank; its process lives)
  wait_at=K: at step K, report exchange every 0.5 s for good (a rank waiting in a collective for a hung peer)
  fail_at=K: at step K of the first attempt (TORCHELASTIC_RESTART_COUNT 0), exit 3 (a failed worker)
  cpu=1: BUSY_S is CPU time, spent spinning (time.process_time), not a sleep: CPU contention (a quota, a competing
         process on the same core) stretches its wall time, as it would a real worker's compute
"""
import os
import sys
import time

from taehv_progress import report

steps, busy, exchange = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
mode, _, at = (sys.argv[4] if len(sys.argv) > 4 else "none=-1").partition("=")


def busy_for(seconds):
    if mode != "cpu":
        time.sleep(seconds)
        return
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


report(0, "startup")
for step in range(steps):
    if mode == "stall_at" and step == int(at):
        report(step, "data")
        while True:
            time.sleep(60)
    if mode == "fail_at" and step == int(at) and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        sys.exit(3)
    if mode == "wait_at" and step == int(at):
        while True:
            report(step, "exchange")
            time.sleep(0.5)
    report(step, "data")
    busy_for(busy / 2)
    report(step, "forward_backward")
    busy_for(busy / 2)
    report(step, "exchange")
    time.sleep(exchange)
