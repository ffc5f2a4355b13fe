"""Writes what a worker was started with (argv, sys.executable, environment) to $PROBE_OUT/rank_<RANK>.json, exits 0.

Run by torchrun_compat_test.py under the real torchrun and under taehv-run with the same command line.
"""
import json
import os
import sys

out = os.environ["PROBE_OUT"]
rank = os.environ.get("RANK", "none")
with open(os.path.join(out, f"rank_{rank}.json"), "w") as f:
    json.dump({"argv": sys.argv, "executable": sys.executable, "env": dict(os.environ)}, f, indent=1, sort_keys=True)
