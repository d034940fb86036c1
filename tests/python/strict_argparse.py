"""A torchrun-style script with a strict argparse (no --local_rank option:
an extra argument on its command line is an error, exit 2). Run by
`muster run -n 4 --cpu THIS --lr 0.1`; reads LOCAL_RANK from the
environment, initialises gloo through env://, all-reduces and trains a
small DDP model whose final parameters must agree on every rank."""
import argparse
import os
import sys

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)
from ddp_agree import train_tiny_ddp  # noqa: E402 (after the torch check)

parser = argparse.ArgumentParser(allow_abbrev=False)
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()  # exits 2 on anything it does not know
assert args.lr == 0.1, args.lr
local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group(backend="gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4 and rank == int(os.environ["RANK"]) and local_rank == rank
t = torch.tensor([float(local_rank)])
dist.all_reduce(t)
assert t.item() == 6.0, t
train_tiny_ddp(args.lr)
dist.barrier()
if rank == 0:
    print(f"strict-argparse torchrun script over {world} ranks OK, parameters agree")
dist.destroy_process_group()
