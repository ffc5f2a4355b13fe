#!/usr/bin/env python3
"""Worker for the simulated multi-pod tests: a real TCP rendezvous at MASTER_ADDR:MASTER_PORT, like c10d's store.

Rank 0 listens on MASTER_PORT and waits for every other rank; each other rank connects (retrying, since pods
start in any order) and sends its torchrun variables. Rank 0 checks that ranks 0..WORLD_SIZE-1 each came once
with the same WORLD_SIZE, answers "ok", and writes OUTDIR/master.txt; every rank writes OUTDIR/rank<R>.txt.
Connections that close without a line (taehv-run's master-wait probe) are ignored.
Usage: rendezvous_worker.py OUTDIR
"""
import os
import socket
import sys
import time

outdir = sys.argv[1]
env = {k: os.environ.get(k, "") for k in
       ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")}
rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
line = " ".join(f"{k}={v}" for k, v in env.items())


def report(text):
    with open(os.path.join(outdir, f"rank{rank}.txt"), "w") as f:
        f.write(text + "\n")


if rank == 0:
    server = socket.create_server((env["MASTER_ADDR"], int(env["MASTER_PORT"])), reuse_port=False)
    server.settimeout(60)
    seen = {0: line}
    peers = []
    while len(seen) < world:
        conn, _ = server.accept()
        data = conn.makefile().readline().strip()
        if not data:  # a probe: connected and closed
            conn.close()
            continue
        fields = dict(kv.split("=", 1) for kv in data.split())
        r = int(fields["RANK"])
        if r in seen or not 0 <= r < world or int(fields["WORLD_SIZE"]) != world:
            print(f"rendezvous: bad peer {data}", file=sys.stderr)
            sys.exit(3)
        seen[r] = data
        peers.append(conn)
    for conn in peers:
        conn.sendall(b"ok\n")
        conn.close()
    with open(os.path.join(outdir, "master.txt"), "w") as f:
        f.write("\n".join(seen[r] for r in sorted(seen)) + "\n")
    report(line)
else:
    deadline = time.time() + 60
    while True:
        try:
            conn = socket.create_connection((env["MASTER_ADDR"], int(env["MASTER_PORT"])), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                print("rendezvous: master never answered", file=sys.stderr)
                sys.exit(4)
            time.sleep(0.1)
    conn.sendall((line + "\n").encode())
    conn.settimeout(60)
    answer = conn.makefile().readline().strip()
    if answer != "ok":
        print(f"rendezvous: master said {answer!r}", file=sys.stderr)
        sys.exit(5)
    report(line)
