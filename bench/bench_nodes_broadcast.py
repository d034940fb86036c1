#!/usr/bin/env python3
"""Broadcast across nodes on loopback: NODES private musterd (the first one
the coordinator, plain TCP between them) and `muster run --nnodes NODES
-n 2` on each, running tests' muster_cluster_worker: 256 MiB from rank 0 to
the other ranks (one on rank 0's node, through its stream; two on each
other node, through the daemons). Prints

    bench broadcast_256MiB_<NODES>nodes_x2 muster_s=X

the median over 5 calls after a warm-up of each call's slowest rank, every
call between two barriers of all ranks, the second within the time (as the
gloo anchor's are), so no rank's check of its bytes overlaps a call.
With `star`, only the coordinator's daemon listens for peers, so every
chunk goes through it (the fallback); else every node's does, and chunks go
node to node along a chain.
Usage: bench_nodes_broadcast.py BUILD_DIR [MIB [NODES [star]]]
"""
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    build = sys.argv[1]
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    nodes = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    star = len(sys.argv) > 4 and sys.argv[4] == "star"
    musterd = os.path.join(build, "daemon", "musterd")
    muster = os.path.join(build, "client", "muster")
    worker = os.path.join(build, "tests", "muster_cluster_worker")
    calls = 6
    port = free_port()
    daemons, runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            dirs = [os.path.join(tmp, f"node{i}") for i in range(nodes)]
            for i, d in enumerate(dirs):
                # Every node's daemon listens (chunks go node to node along
                # a chain), or with `star` only the coordinator's (chunks go
                # through it).
                listens = i == 0 or not star
                peer_port = port if i == 0 else free_port()
                peer = ["--peer-bind", "127.0.0.1", "--peer-port", str(peer_port)] if listens else []
                daemons.append(subprocess.Popen(
                    [musterd, "--runtime-dir", d, "--log-level", os.environ.get("BENCH_LOG", "error"), "--no-config",
                     "--peer-plain"] + peer))
            for d in dirs:
                for _ in range(400):
                    if os.path.exists(os.path.join(d, "musterd.sock")):
                        break
                    time.sleep(0.025)
            time.sleep(0.2)
            for i, d in enumerate(dirs):
                env = dict(os.environ, MUSTER_ENDPOINT=f"ipc://{d}/musterd.sock")
                runs.append(subprocess.Popen(
                    [muster, "run", "--nnodes", str(nodes), "-n", "2", "--coordinator",
                     f"127.0.0.1:{port}", "--job-id", f"bench-nodes{nodes}", "--cpu", "--use-env",
                     "--local-addr", "127.0.0.1", "--node-rank", str(i), worker, "bcast-loop",
                     str(mib << 20), "0", str(calls), "sync"],
                    env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            outs = [r.communicate(timeout=600)[0] for r in runs]
        finally:
            for p in runs + daemons:
                if p.poll() is None:
                    p.kill()
                p.wait()
    times = {}  # call -> slowest rank's seconds
    digests = set()
    ranks = 0
    for out in outs:
        for m in re.finditer(r"bcast=([0-9a-f]+) n=(\d+) ms=([0-9.]+)", out):
            digests.add(m.group(1))
            n = int(m.group(2))
            times[n] = max(times.get(n, 0.0), float(m.group(3)) / 1000)
            ranks += n == 0
    if ranks != 2 * nodes or len(digests) != 1 or len(times) != calls:
        sys.exit("broadcast across nodes failed:\n" + "\n".join(outs))
    print(f"bench broadcast_{mib}MiB_{nodes}nodes_x2{'_star' if star else ''} muster_s="
          f"{statistics.median(times[n] for n in range(1, calls)):.4f}")


if __name__ == "__main__":
    main()
