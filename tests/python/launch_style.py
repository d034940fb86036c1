"""An unmodified torch.distributed.launch-style script: parses --local_rank
with argparse (run by `muster launch -n 4 THIS --lr 0.1`, without --use-env),
initialises gloo through env://, all-reduces and trains a small DDP model
whose final parameters must agree on every rank."""
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

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, required=True)
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
assert args.local_rank == int(os.environ["LOCAL_RANK"]), (args.local_rank, os.environ["LOCAL_RANK"])
assert args.lr == 0.1, args.lr
if torch.cuda.is_available() and torch.cuda.device_count() > args.local_rank:
    torch.cuda.set_device(args.local_rank)
dist.init_process_group(backend="gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4 and rank == int(os.environ["RANK"])
t = torch.tensor([float(args.local_rank)])
dist.all_reduce(t)
assert t.item() == 6.0, t
train_tiny_ddp(args.lr)
dist.barrier()
if rank == 0:
    print(f"launch-style --local_rank script over {world} ranks OK, parameters agree")
dist.destroy_process_group()
