#!/usr/bin/env python3
"""Runs muster's benchmarks beside the anchors (../shared/anchors) in one go
and prints, per measurement, one machine-readable line

    bench NAME muster_s=X anchor_s=Y ratio=X/Y [floor_s=Z]

followed by a Markdown table. Usage (meson does this for
`meson test -C build --benchmark`):

    run_bench.py BUILD_DIR ANCHORS_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

TORCH_PY = "/usr/bin/python3"


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

    def emit(name, muster_s, anchor_s=None, floor_s=None, anchor_name=""):
        line = f"bench {name} muster_s={muster_s:.4f}"
        if anchor_s:
            line += f" anchor_s={anchor_s:.4f} ratio={muster_s / anchor_s:.3f}"
        if floor_s:
            line += f" floor_s={floor_s:.4f}"
        print(line, flush=True)
        rows.append((name, muster_s, anchor_s, floor_s, anchor_name))

    # Wire-up against torch's TCPStore.
    sizes = [8, 64, 256]
    wire = muster_lines(run([os.path.join(build, "bench", "bench_wireup"), musterd] + [str(n) for n in sizes]))
    for n in sizes:
        anchor = None
        if have_anchors and have_torch:
            out = run([TORCH_PY, os.path.join(anchors, "torch_store_rdzv.py"), str(n), "4"])
            anchor = float(re.search(r"seconds=([0-9.]+)", out).group(1))
        emit(f"wireup_{n}", wire[f"wireup_{n}"]["muster_s"], anchor, None, "torch TCPStore")

    # Broadcast against gloo, with memcpy as the floor.
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
        if have_anchors and have_torch:
            out = run([TORCH_PY, os.path.join(anchors, "torch_gloo_bcast.py"), "4", "256"])
            anchor = float(re.search(r"seconds=([0-9.]+)", out).group(1))
        emit("broadcast_256MiB_4ranks", b["broadcast_256MiB_4ranks"]["muster_s"], anchor, floor,
             "torch gloo broadcast")

    # Sampler shards against torch's DistributedSampler.
    shard_bin = os.path.join(build, "bench", "bench_shards")
    if os.path.exists(shard_bin):
        s = muster_lines(run([shard_bin, musterd]))
        anchor = torch_sampler_per_rank(10_000_000, 8) if have_torch else None
        emit("shards_10M_8ranks", s["shards_10M_8ranks"]["muster_s"], anchor, None,
             "torch DistributedSampler (per rank)")

    fmt = lambda x: "-" if x is None else f"{x:.4f}"
    print("\n| measurement | muster (s) | anchor (s) | muster / anchor | floor (s) | anchor |")
    print("|---|---|---|---|---|---|")
    for name, m, a, f, an in rows:
        ratio = f"{m / a:.3f}" if a else "-"
        print(f"| {name} | {m:.4f} | {fmt(a)} | {ratio} | {fmt(f)} | {an} |")

if __name__ == "__main__":
    main()
