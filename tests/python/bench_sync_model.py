"""CPU model sync: musterd's shared-memory sync_model vs torch.distributed
(gloo). Not a test; run by hand:

    PYTHONPATH=build/client/python muster run -n 4 --cpu --use-env /usr/bin/python3 \
        tests/python/bench_sync_model.py [MEGABYTES] [REPEATS]
"""
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

import muster
import muster.distributed as md

mb = int(sys.argv[1]) if len(sys.argv) > 1 else 100
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
muster.init_torch("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
layers = max(1, mb * (1 << 20) // (4 * 1024 * 1024))
torch.manual_seed(rank)
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024, bias=True) for _ in range(layers)])
nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
items = [(p, True) for p in model.parameters()]


def gloo_flat(reduce):
    ts = [p.detach() for p in model.parameters()]
    flat = _flatten_dense_tensors(ts)
    if reduce:
        dist.all_reduce(flat)
        flat.div_(world)
    else:
        dist.broadcast(flat, 0)
    for t, s in zip(ts, _unflatten_dense_tensors(flat, ts)):
        t.copy_(s)


variants = {
    "muster sync_model": lambda: md._sync_cpu_muster(items, False, False),
    "gloo per-tensor broadcast": lambda: md._sync_torch(items, False, False, world),
    "gloo flattened broadcast": lambda: gloo_flat(False),
    "muster sync_model, reduce_parameters": lambda: md._sync_cpu_muster(items, True, False),
    "gloo per-tensor all_reduce": lambda: md._sync_torch(items, True, False, world),
    "gloo flattened all_reduce": lambda: gloo_flat(True),
}
for name, fn in variants.items():
    fn()  # warm-up
    times = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        med = statistics.median(times)
        print(f"{name:40s} {nbytes / 2**20:6.0f} MiB x {world} ranks: median {med * 1e3:8.1f} ms "
              f"({nbytes / med / 2**30:5.2f} GiB/s), min {min(times) * 1e3:8.1f} ms", flush=True)
dist.destroy_process_group()
