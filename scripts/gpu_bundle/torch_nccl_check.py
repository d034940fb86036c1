"""The GPU check's PyTorch half, one rank per GPU under `muster run`:
muster.init_torch("nccl") must pick NCCL on the leased GPU (never fall back
to gloo), and an all_reduce of a CUDA tensor must give the sum."""
import sys

import torch
import torch.distributed as dist

import muster

info = muster.init_torch("nccl")
assert dist.get_backend() == "nccl", dist.get_backend()
dev = torch.cuda.current_device()
t = torch.full((1 << 20,), float(dist.get_rank() + 1), device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
world = dist.get_world_size()
want = world * (world + 1) / 2
ok = bool((t == want).all())
uuid = str(torch.cuda.get_device_properties(dev).uuid)
print(f"rank {dist.get_rank()} of {world} on cuda:{dev} ({uuid}): init_torch nccl all_reduce "
      f"{'ok' if ok else 'WRONG'}")
dist.destroy_process_group()
sys.exit(0 if ok else 1)
