"""Stores a program makes on some ranks only, in a different order on each
rank, then init_torch: under `muster run -n 4 --cpu THIS` (issue 46). With
torchrun and env:// such a program starts; the rendezvous must not wait on
a key space that the helper stores shifted. A short store timeout makes a
hang fail in seconds instead of torch's 30 minutes."""
import datetime
import os
import sys

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

import muster

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])

# Rank 0: two default stores and a named one; rank 1: the named one first,
# then a default one; rank 2: one default store; rank 3: none.
made = {0: ["default", "default", "cfg"], 1: ["cfg", "default"], 2: ["default"], 3: []}[rank]
stores = {}
for kind in made:
    stores[kind] = muster.MusterStore(prefix="cfg/" if kind == "cfg" else None)
if rank == 0:
    stores["cfg"].set("config", b"x" * 1000)  # a helper store's usual use
    stores["default"].set("from0", "hello")

muster.init_torch(timeout=datetime.timedelta(seconds=20))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t

# Stores with the same prefix share their keys across ranks, as clients of
# one TCPStore do, whichever rank made its store first.
if "cfg" in stores:
    assert stores["cfg"].get("config") == b"x" * 1000
if "default" in stores:
    assert stores["default"].get("from0") == b"hello"
dist.barrier()

# A second init after destroy_process_group (collective, so every rank
# counts it alike) rendezvouses afresh.
dist.destroy_process_group()
muster.init_torch(timeout=datetime.timedelta(seconds=20))
t = torch.tensor([1.0])
dist.all_reduce(t)
assert t.item() == world, t
dist.destroy_process_group()
print(f"rank {rank}: init_torch came up past stores made on some ranks")
