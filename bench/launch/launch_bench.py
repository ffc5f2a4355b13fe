#!/usr/bin/env python3
"""Launch overhead: taehv-run against torchrun, side by side.

  taehv-run --standalone --nproc-per-node 2 -- /bin/true
  torchrun  --standalone --nproc-per-node 2 --no-python /bin/true     (the project's .venv, torch 2.13)

Prints, for each launcher: median (and min/max) wall time over N runs, the peak RSS of the largest process of
the tree (median ru_maxrss, what `/usr/bin/time -v` reports: the largest of the launcher and every descendant),
and the peak of the summed PSS of the whole process tree (launcher + helpers + workers; shared pages split,
not double counted), sampled from /proc/<pid>/smaps_rollup while the tree runs; then
the ratios and whether the targets (<= 1/50 of torchrun's wall time, <= 1/20 of its peak memory) are met.

Processes are started with posix_spawn, not fork: a fork of this Python would count Python's own RSS in the
child's ru_maxrss. The tree sum is sampled with workers that live 0.5 s (/bin/sleep 0.5 instead of /bin/true, the same for both
launchers) so that the sampler sees every process of the tree; /bin/true trees live only milliseconds.

torchrun is run as `<repo>/.venv/bin/python -m torch.distributed.run` (scripts/setup.sh makes .venv with torch
2.13.0), once with its default `--monitor_interval` and once with 0.1 s; the targets are checked against the faster.

Usage: bench/launch/launch_bench.py [--taehv-run PATH] [--runs N] [--torchrun-runs M] [--nproc 2]
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

VENV_PYTHON = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           ".venv", "bin", "python")


def find_taehv_run(explicit):
    if explicit:
        return explicit
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "bin", "taehv-run")
        if name.startswith("build") and os.access(path, os.X_OK):
            candidates.append((os.path.getmtime(path), path))
    if not candidates:
        sys.exit("launch_bench: no taehv-run found under build*/bin; build it (cmake --build <dir> --target "
                 "taehv-run) or pass --taehv-run PATH")
    return max(candidates)[1]


def ensure_torchrun():
    probe = subprocess.run([VENV_PYTHON, "-c", "import torch.distributed.run"], capture_output=True)
    if probe.returncode != 0:
        sys.exit(f"launch_bench: {VENV_PYTHON} cannot import torch.distributed.run; run scripts/setup.sh")


def spawn(cmd, stderr_path=None):
    """Starts cmd with posix_spawn (vfork-like): a fork() of this Python process would count Python's own
    ~10 MiB in the child's ru_maxrss, since the high-water mark is taken before exec as well."""
    actions = [(os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0)]
    if stderr_path:
        actions.append((os.POSIX_SPAWN_OPEN, 2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    else:
        actions.append((os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0))
    return os.posix_spawn(cmd[0], cmd, os.environ, file_actions=actions)


def run_once(cmd, stderr_path):
    """Wall seconds of one run; fails loudly if the launch failed."""
    start = time.perf_counter()
    pid = spawn(cmd, stderr_path)
    _, status = os.waitpid(pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        with open(stderr_path, errors="replace") as f:
            sys.exit(f"launch_bench: {' '.join(cmd)} failed with {code}:\n{f.read()}")
    return wall


def largest_rss_kib(cmd, out_path):
    """ru_maxrss of the tree as /usr/bin/time reports it (the largest of the process and its descendants).
    Measured through /usr/bin/time because the high-water mark also counts the spawner's memory at exec time
    (fork copies it, vfork/posix_spawn shares it): a small C spawner keeps that error near 1 MiB for both."""
    pid = spawn(["/usr/bin/time", "-f", "%M", "-o", out_path] + cmd)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"launch_bench: {' '.join(cmd)} failed under /usr/bin/time")
    with open(out_path) as f:
        return int(f.read().split()[-1])


def tree_pids(root):
    """root and all its descendants, via /proc/<pid>/task/<tid>/children."""
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return pids


def tree_pss_kib(root):
    """Summed proportional set size of the tree: pages shared between its processes (a fork, shared libraries)
    are split between them instead of counted once per process."""
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except (OSError, IndexError, ValueError):
            pass
    return total


def sampled_tree_peak(cmd):
    """Peak of the summed PSS of the whole tree of cmd, sampled while it runs."""
    pid = spawn(cmd)
    peak = 0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        peak = max(peak, tree_pss_kib(pid))
        time.sleep(0.002)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"launch_bench: {' '.join(cmd)} failed")
    return peak


def fmt_s(s):
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.3f} s"


def fmt_kib(k):
    return f"{k / 1024:.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--taehv-run", help="taehv-run binary (default: newest build*/bin/taehv-run)")
    ap.add_argument("--runs", type=int, default=30, help="taehv-run runs (default 30)")
    ap.add_argument("--torchrun-runs", type=int, default=5, help="torchrun runs per variant (default 5)")
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()

    taehv = find_taehv_run(args.taehv_run)
    ensure_torchrun()
    n = str(args.nproc)
    torchrun = [VENV_PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", n]
    launchers = {
        "taehv-run": (lambda w: [taehv, "--standalone", "--nproc-per-node", n, "--"] + w, args.runs),
        "torchrun (default)": (lambda w: torchrun + ["--no_python"] + w, args.torchrun_runs),
        "torchrun (monitor 0.1s)": (lambda w: torchrun + ["--monitor_interval", "0.1", "--no_python"] + w,
                                    args.torchrun_runs),
    }

    print(f"taehv-run: {taehv}")
    print(f"torchrun:  {VENV_PYTHON} -m torch.distributed.run (torch "
          + subprocess.run([VENV_PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                           text=True).stdout.strip() + ")")
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (wall times include scheduling "
          "delays from other load)")
    print(f"command: --standalone, {n} workers of /bin/true\n")

    # One warm-up each (page cache), then interleaved runs so that background load hits both alike.
    results = {name: {"wall": [], "maxrss": []} for name in launchers}
    err = tempfile.NamedTemporaryFile(prefix="launch-bench-", suffix=".err", delete=False).name
    for name, (make, _) in launchers.items():
        run_once(make(["/bin/true"]), err)
    most = max(r for _, r in launchers.values())
    for i in range(most):
        for name, (make, runs) in launchers.items():
            if i < runs:
                results[name]["wall"].append(run_once(make(["/bin/true"]), err))
    for name, (make, runs) in launchers.items():
        results[name]["maxrss"] = [largest_rss_kib(make(["/bin/true"]), err) for _ in range(min(runs, 5))]
    for name, (make, runs) in launchers.items():
        peaks = [sampled_tree_peak(make(["/bin/sleep", "0.5"])) for _ in range(min(runs, 3))]
        results[name]["tree"] = max(peaks)
    os.unlink(err)

    header = f"{'launcher':<26}{'median wall':>13}{'min':>11}{'max':>11}{'largest proc RSS':>18}{'tree PSS peak':>15}"
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        print(f"{name:<26}{fmt_s(statistics.median(r['wall'])):>13}{fmt_s(min(r['wall'])):>11}"
              f"{fmt_s(max(r['wall'])):>11}{fmt_kib(statistics.median(r['maxrss'])):>18}{fmt_kib(r['tree']):>15}"
              f"   ({len(r['wall'])} runs)")
    print("(largest proc RSS: median of up to 5 runs under /usr/bin/time -f %M; tree PSS: max of up to 3 "
          "sampled runs with /bin/sleep 0.5 workers)")

    t = results["taehv-run"]
    ok = True
    print()
    for name in ("torchrun (default)", "torchrun (monitor 0.1s)"):
        b = results[name]
        wall_ratio = statistics.median(t["wall"]) / statistics.median(b["wall"])
        rss_ratio = statistics.median(t["maxrss"]) / statistics.median(b["maxrss"])
        tree_ratio = t["tree"] / b["tree"]
        print(f"taehv-run / {name}: wall 1/{1 / wall_ratio:.0f}, largest-process RSS 1/{1 / rss_ratio:.0f}, "
              f"tree PSS 1/{1 / tree_ratio:.0f}")
        if name == "torchrun (monitor 0.1s)":
            ok = wall_ratio <= 1 / 50 and rss_ratio <= 1 / 20 and tree_ratio <= 1 / 20
    print(f"\ntargets (<= 1/50 wall, <= 1/20 memory, against the faster torchrun): {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
