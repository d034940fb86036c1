#!/usr/bin/env python3
"""Runs muster's benchmarks beside the anchors (../shared/anchors) in one go
and prints, per measurement, one machine-readable line

    bench NAME muster_s=X anchor_s=Y ratio=X/Y [floor_s=Z]
        [requests=N muster_rps=N/X anchor_rps=N/Y]

(the rates where both sides did the same N requests; the scale lines,
bench_scale's, add the coordinator's message counts, coordinator_msgs=M
and the others it prints) followed by a Markdown table, and one for the
scale benchmark. Usage (meson does this for
`meson test -C build --benchmark`):

    run_bench.py BUILD_DIR ANCHORS_DIR [--nodes-only]

(--nodes-only: the broadcasts across nodes beside gloo, nothing else)
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

TORCH_PY = "/usr/bin/python3"
BCAST_PAIRS = 5
BCAST_SETTLE_S = 2
NODES_PAIRS = 3


def run(cmd, **kw):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def muster_lines(out):
    """{name: {key: float}} from 'bench NAME k=v ...' lines."""
    res = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "bench":
            res[parts[1]] = {k: float(v) for k, v in (p.split("=") for p in parts[2:])}
    return res


def torch_sampler_per_rank(n, world):
    code = f"""
import time, torch
from torch.utils.data.distributed import DistributedSampler
ts = []
for rank in range({world}):
    s = DistributedSampler(range({n}), num_replicas={world}, rank=rank, shuffle=True, seed=0)
    s.set_epoch(1)
    t = time.perf_counter(); idx = list(iter(s)); ts.append(time.perf_counter() - t)
print(sum(ts) / len(ts))
"""
    return float(run([TORCH_PY, "-c", code]).strip())


# torch's TCPStore under the load of bench_load.cpp: CLIENTS client threads
# (spread over PROCS processes, as torch_store_rdzv.py spreads its ranks),
# each connected before the start, do ROUNDS set + get of their own key;
# the median over RUNS of the time from the start until all are through.
TORCH_LOAD = """
import sys, time, threading, statistics, resource, multiprocessing as mp
from datetime import timedelta
import torch.distributed as dist

CLIENTS, ROUNDS, PROCS, RUNS = (int(a) for a in sys.argv[1:5])

def worker(port, ranks, ready_q, start_evt, done_q):
    go = threading.Event()
    errors = []
    def one(r):
        try:
            s = dist.TCPStore("127.0.0.1", port, CLIENTS, False, timeout=timedelta(seconds=120))
            key = f"key/{r}"
            val = bytearray(bytes([97 + r % 26]) * 64)
            ready_q.put(1)
            go.wait()
            for i in range(ROUNDS):
                val[0] = 65 + i % 26
                s.set(key, bytes(val))
                if s.get(key) != bytes(val):
                    errors.append(r)
        except Exception as e:
            errors.append(repr(e))
            ready_q.put(1)
    ts = [threading.Thread(target=one, args=(r,)) for r in ranks]
    for t in ts: t.start()
    start_evt.wait()
    go.set()
    for t in ts: t.join()
    done_q.put(len(errors))

def once(port):
    ctx = mp.get_context("fork")
    ready_q, done_q, start_evt = ctx.Queue(), ctx.Queue(), ctx.Event()
    chunks = [list(range(i, CLIENTS, PROCS)) for i in range(PROCS)]
    ps = [ctx.Process(target=worker, args=(port, ch, ready_q, start_evt, done_q)) for ch in chunks]
    for p in ps: p.start()
    for _ in range(CLIENTS): ready_q.get()
    time.sleep(0.1)
    t0 = time.perf_counter(); start_evt.set()
    errors = sum(done_q.get() for _ in ps)
    dt = time.perf_counter() - t0
    for p in ps: p.join()
    assert errors == 0, f"{errors} client(s) failed"
    return dt

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = 4 * CLIENTS + 1024
if soft < want and soft != resource.RLIM_INFINITY:
    resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
server = dist.TCPStore("127.0.0.1", 0, CLIENTS, True, timeout=timedelta(seconds=120), wait_for_workers=False)
print(f"seconds={statistics.median(once(server.port) for _ in range(RUNS)):.4f}")
"""


def torch_store_load(clients, rounds, procs=4, runs=5):
    with tempfile.NamedTemporaryFile("w", suffix="_torch_store_load.py") as f:
        f.write(TORCH_LOAD)
        f.flush()
        out = run([TORCH_PY, f.name, str(clients), str(rounds), str(procs), str(runs)])
    return float(re.search(r"seconds=([0-9.]+)", out).group(1))


def nodes_rows(build, anchors, floor, emit):
    """Across nodes: NODES daemons on loopback x 2 ranks, each beside gloo
    with as many ranks over TCP, in NODES_PAIRS back-to-back pairs (the line
    gives each side's median, and the lowest and highest ratio of a pair)."""
    worker = os.path.join(build, "tests", "muster_cluster_worker")
    if not os.path.exists(worker):
        return
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_nodes_broadcast.py")
    for nodes in (2, 4):
        name = f"broadcast_256MiB_{nodes}nodes_x2"
        mine, gloo = [], []
        for i in range(NODES_PAIRS if anchors else 1):
            time.sleep(BCAST_SETTLE_S)
            mine.append(muster_lines(run([sys.executable, script, build, "256", str(nodes)]))[
                name]["muster_s"])
            if not anchors:
                break
            time.sleep(BCAST_SETTLE_S)
            out = run([TORCH_PY, os.path.join(anchors, "torch_gloo_bcast.py"), str(2 * nodes),
                       "256"])
            gloo.append(float(re.search(r"seconds=([0-9.]+)", out).group(1)))
            print(f"note: {name} pair {i + 1}: muster {mine[-1]:.4f} s, gloo {gloo[-1]:.4f} s",
                  file=sys.stderr, flush=True)
        extra = {}
        if gloo:
            ratios = [m / g for m, g in zip(mine, gloo)]
            extra = {"pairs": len(ratios), "ratio_lo": min(ratios), "ratio_hi": max(ratios)}
        emit(name, statistics.median(mine), statistics.median(gloo) if gloo else None, floor,
             f"torch gloo broadcast ({2 * nodes} ranks, TCP)", extra=extra)


def main():
    build, anchors = sys.argv[1], sys.argv[2]
    musterd = os.path.join(build, "daemon", "musterd")
    have_anchors = os.path.isdir(anchors)
    have_torch = subprocess.run([TORCH_PY, "-c", "import torch"], capture_output=True).returncode == 0
    if not have_anchors:
        print(f"note: no anchors at {anchors}; printing muster's numbers alone", file=sys.stderr)
    if not have_torch:
        print(f"note: {TORCH_PY} has no torch; torch anchors skipped", file=sys.stderr)
    rows = []
    rates = []  # (name, muster req/s, anchor req/s or None)
    nodes_only = "--nodes-only" in sys.argv[3:]

    def emit(name, muster_s, anchor_s=None, floor_s=None, anchor_name="", requests=None,
             extra=None):
        line = f"bench {name} muster_s={muster_s:.4f}"
        if anchor_s:
            line += f" anchor_s={anchor_s:.4f} ratio={muster_s / anchor_s:.3f}"
        if floor_s:
            line += f" floor_s={floor_s:.4f}"
        for k, v in (extra or {}).items():  # more fields of muster's own line
            line += f" {k}={v:.4f}" if isinstance(v, float) and v != int(v) else f" {k}={v:.0f}"
        if requests:  # the same number of requests on both sides: as rates too
            line += f" requests={requests:.0f} muster_rps={requests / muster_s:.0f}"
            if anchor_s:
                line += f" anchor_rps={requests / anchor_s:.0f}"
            rates.append((name, requests / muster_s, requests / anchor_s if anchor_s else None))
        print(line, flush=True)
        rows.append((name, muster_s, anchor_s, floor_s, anchor_name))

    if nodes_only:
        nodes_rows(build, anchors if have_anchors and have_torch else None, None, emit)
        for name, m, a, f, an in rows:
            print(f"| {name} | {m:.4f} | {'-' if a is None else f'{a:.4f}'} | "
                  f"{'-' if not a else f'{m / a:.3f}'} | {an} |")
        return
    # Wire-up against torch's TCPStore.
    sizes = [8, 64, 256]
    wire = muster_lines(run([os.path.join(build, "bench", "bench_wireup"), musterd] + [str(n) for n in sizes]))
    for n in sizes:
        anchor = None
        if have_anchors and have_torch:
            out = run([TORCH_PY, os.path.join(anchors, "torch_store_rdzv.py"), str(n), "4"])
            anchor = float(re.search(r"seconds=([0-9.]+)", out).group(1))
        emit(f"wireup_{n}", wire[f"wireup_{n}"]["muster_s"], anchor, None, "torch TCPStore")

    # Broadcast against gloo, with memcpy as the floor. Both sides swing by
    # tens of percent from run to run on a shared machine (memory bandwidth
    # above all), so they run as BCAST_PAIRS back-to-back pairs: the line
    # gives each side's median, and the lowest and highest ratio of a pair.
    bcast_bin = os.path.join(build, "bench", "bench_broadcast")
    if os.path.exists(bcast_bin):
        b = muster_lines(run([bcast_bin, musterd]))
        floor = None
        if have_anchors:
            with tempfile.TemporaryDirectory() as tmp:
                exe = os.path.join(tmp, "memcpy_limit")
                run(["cc", "-O2", os.path.join(anchors, "memcpy_limit.c"), "-o", exe])
                out = subprocess.run([exe, "256"], capture_output=True, text=True).stdout
                floor = float(re.search(r"seconds=([0-9.]+)", out).group(1))
        anchor = None
        mine = [b["broadcast_256MiB_4ranks"]["muster_s"]]
        extra = {}
        if have_anchors and have_torch:
            # Pairs of the same two commands; the run above (all paths) stays
            # out of them.
            gloo, mine = [], []
            for i in range(BCAST_PAIRS):
                # Each side starts on a settled machine: the other's processes
                # (gloo's four hold 1.5 GB) have just gone.
                time.sleep(BCAST_SETTLE_S)
                mine.append(muster_lines(run([bcast_bin, musterd, "default"]))[
                    "broadcast_256MiB_4ranks"]["muster_s"])
                time.sleep(BCAST_SETTLE_S)
                out = run([TORCH_PY, os.path.join(anchors, "torch_gloo_bcast.py"), "4", "256"])
                gloo.append(float(re.search(r"seconds=([0-9.]+)", out).group(1)))
                print(f"note: broadcast pair {i + 1}: muster {mine[-1]:.4f} s, gloo {gloo[-1]:.4f} s",
                      file=sys.stderr, flush=True)
            anchor = statistics.median(gloo)
            ratios = [m / g for m, g in zip(mine, gloo)]
            extra = {"pairs": len(ratios), "ratio_lo": min(ratios), "ratio_hi": max(ratios)}
        emit("broadcast_256MiB_4ranks", statistics.median(mine), anchor, floor,
             "torch gloo broadcast", extra=extra)
        nodes_rows(build, anchors if have_anchors and have_torch else None, floor, emit)

    # Sampler shards against torch's DistributedSampler.
    shard_bin = os.path.join(build, "bench", "bench_shards")
    if os.path.exists(shard_bin):
        s = muster_lines(run([shard_bin, musterd]))
        anchor = torch_sampler_per_rank(10_000_000, 8) if have_torch else None
        emit("shards_10M_8ranks", s["shards_10M_8ranks"]["muster_s"], anchor, None,
             "torch DistributedSampler (per rank)")
        # Resuming mid-epoch (consumed = 5 M) against torch's sampler, which
        # cannot resume: the whole epoch per rank, W = 6.
        anchor = torch_sampler_per_rank(10_000_000, 6) if have_torch else None
        emit("shards_10M_resumed_6ranks", s["shards_10M_resumed_6ranks"]["muster_s"], anchor, None,
             "torch DistributedSampler (per rank, W = 6, whole epoch)")
        # The daemon's loop while it computes a permutation: the slowest ping
        # then, beside an idle daemon's ping as the floor.
        p = s["ping_during_10M_permutation"]
        emit("ping_during_10M_permutation", p["muster_s"], None, p["floor_s"],
             "idle ping (floor)", extra={"median_s": p["median_s"], "pings": p["pings"]})

    # 1,000 clients at once against torch's TCPStore with as many client threads.
    load_bin = os.path.join(build, "bench", "bench_load")
    if os.path.exists(load_bin):
        clients, rounds = 1000, 10
        l = muster_lines(run([load_bin, musterd, str(clients), str(rounds)]))[f"load_{clients}"]
        anchor = torch_store_load(clients, rounds) if have_torch else None
        emit(f"load_{clients}_clients", l["muster_s"], anchor, None,
             f"torch TCPStore ({clients} client threads)", l["requests"])

    # Many nodes: N ranks as N/16 node daemons x 16 rank threads on loopback,
    # star against relay tree, with the messages the coordinating daemon
    # handled (bench_scale.cpp). Anchor: torch's TCPStore with N ranks doing
    # the same id + barrier against one store (no nodes, no rendezvous).
    scale_bin = os.path.join(build, "bench", "bench_scale")
    scale = []
    if os.path.exists(scale_bin):
        sizes = [64, 256, 1024]
        lines = muster_lines(run([scale_bin, musterd, "--runs", "7"] + [str(n) for n in sizes]))
        anchors_by_n = {}
        for name, f in lines.items():
            n = int(name.split("_")[1])
            if n not in anchors_by_n:
                anchors_by_n[n] = None
                if have_anchors and have_torch:
                    out = run([TORCH_PY, os.path.join(anchors, "torch_store_rdzv.py"), str(n), "4"])
                    anchors_by_n[n] = float(re.search(r"seconds=([0-9.]+)", out).group(1))
            keys = ["coordinator_msgs", "world_s", "after_world_s", "rendezvous_msgs",
                    "after_world_msgs", "coordinator_msgs_min", "coordinator_msgs_max",
                    "teardown_msgs", "nodes"]
            emit(name, f["muster_s"], anchors_by_n[n], None, "torch TCPStore, one store",
                 extra={k: f[k] for k in keys if k in f})
            scale.append((name, f))

    fmt = lambda x: "-" if x is None else f"{x:.4f}"
    print("\n| measurement | muster (s) | anchor (s) | muster / anchor | floor (s) | anchor |")
    print("|---|---|---|---|---|---|")
    for name, m, a, f, an in rows:
        ratio = f"{m / a:.3f}" if a else "-"
        print(f"| {name} | {m:.4f} | {fmt(a)} | {ratio} | {fmt(f)} | {an} |")
    for name, m, a in rates:
        print(f"\n{name}: muster {m:.0f} requests/s, anchor " + ("-" if a is None else f"{a:.0f} requests/s"))
    if scale:
        print("\n| ranks | nodes | topology | wire-up (s) | until world (s) | after world (s)"
              " | coordinator msgs (min-max) | of them after world |")
        print("|---|---|---|---|---|---|---|---|")
        for name, f in scale:
            _, n, topo = name.split("_", 2)
            print(f"| {n} | {f['nodes']:.0f} | {topo} | {f['muster_s']:.4f} | {f['world_s']:.4f}"
                  f" | {f['after_world_s']:.4f} | {f['coordinator_msgs']:.0f}"
                  f" ({f['coordinator_msgs_min']:.0f}-{f['coordinator_msgs_max']:.0f})"
                  f" | {f['after_world_msgs']:.0f} |")

if __name__ == "__main__":
    main()
