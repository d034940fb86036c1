"""Rank bookkeeping and init_torch under
`muster run -n 4 --use-env /usr/bin/python3 THIS`: exactly one master and one
local master per node, muster.Error carries code and name, and
torch.distributed comes up through musterd's store with no MASTER_ADDR or
MASTER_PORT."""
import os
import sys

# Prove torch's bootstrap does not need them: muster run sets them.
os.environ.pop("MASTER_ADDR", None)
os.environ.pop("MASTER_PORT", None)

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

import muster

c = muster.client()
me = muster.rank_info()
assert me.rank == int(os.environ["RANK"]) and me.local_rank == int(os.environ["LOCAL_RANK"])
assert me.world_size == 4 and me.num_nodes == 1, me
assert muster.is_master() == (me.rank == 0)
assert muster.is_local_master() == (me.local_rank == 0)

c.add("masters", 1 if muster.is_master() else 0)
c.add(f"local_masters/{me.node_rank}", 1 if muster.is_local_master() else 0)
muster.barrier("counted")
assert c.add("masters", 0) == 1, "exactly one rank must be the master"
for node in range(me.num_nodes):
    assert c.add(f"local_masters/{node}", 0) == 1, f"node {node}: one local master"

# Errors: a muster.Error with the protocol's code and name.
try:
    c.get("no/such/key", timeout=0.2)
    raise AssertionError("get of a missing key must time out")
except muster.Error as e:
    assert e.name == "timeout" and e.code == muster.ERROR_CODES["timeout"], (e.code, e.name)
    assert "no/such/key" in str(e) or str(e), str(e)

# NCCL id: 128 bytes, the same on every rank.
nid = muster.nccl_unique_id("test")
assert isinstance(nid, bytes) and len(nid) == 128
c.set(f"nid/{me.rank}", nid)
assert all(c.get(f"nid/{r}") == nid for r in range(me.world_size))

# torch.distributed through musterd's store.
backend = muster.init_torch()
want = "nccl" if me.device >= 0 and torch.cuda.is_available() else "gloo"
assert backend == want, (backend, want, me.device)
if want == "nccl":
    assert torch.cuda.current_device() == me.device
assert dist.is_initialized() and dist.get_rank() == me.rank
assert dist.get_world_size() == me.world_size
t = torch.tensor([float(me.rank + 1)])
dist.all_reduce(t)
assert t.item() == 10.0, t
sub = dist.new_group([0, 1])
if me.rank < 2:
    u = torch.ones(1)
    dist.all_reduce(u, group=sub)
    assert u.item() == 2.0
dist.barrier()
assert "MASTER_PORT" not in os.environ
if muster.is_master():
    print("masters, errors, nccl ids and init_torch OK")
dist.destroy_process_group()
