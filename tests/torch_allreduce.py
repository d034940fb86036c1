"""An unmodified torchrun-style script: muster run -n 4 --use-env /usr/bin/python3 THIS.

Reads torchrun's environment, initialises gloo through env://, all-reduces
and checks the sum on every rank.
"""
import os
import sys

try:
    import torch
    import torch.distributed as dist
except ImportError as e:  # meson counts exit code 77 as skipped
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
assert local_rank == rank, (local_rank, rank)
dist.init_process_group("gloo", init_method="env://")
assert dist.get_rank() == rank and dist.get_world_size() == world
t = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
assert t.tolist() == [expected, 10 * expected], t.tolist()
dist.barrier()
if rank == 0:
    print(f"torch all_reduce over {world} ranks: {t.tolist()} OK")
dist.destroy_process_group()
