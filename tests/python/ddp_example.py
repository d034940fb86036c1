"""Shaped like pytorch/examples distributed/ddp/example.py (a toy model
wrapped in DistributedDataParallel, SGD on random batches), on CPU with gloo:
`muster run -n 4 --cpu THIS --local_world_size 4`. Each rank draws its own
data; at the end every rank must hold the same parameters."""
import argparse
import os
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.optim as optim
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

from ddp_agree import assert_ranks_agree, flat_parameters


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(local_world_size, local_rank):
    rank = dist.get_rank()
    print(f"[{os.getpid()}] rank = {rank}, world_size = {dist.get_world_size()}, "
          f"local_world_size = {local_world_size}, local_rank = {local_rank}")
    torch.manual_seed(1000 + rank)  # different models and data on every rank
    ddp_model = DDP(ToyModel())
    start = flat_parameters(ddp_model)  # rank 0's, broadcast by DDP
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.01)
    for _ in range(10):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 5)
        loss_fn(outputs, labels).backward()
        optimizer.step()
    assert_ranks_agree(ddp_model, start)
    if rank == 0:
        print(f"ddp example: parameters agree on all {dist.get_world_size()} ranks")


def spmd_main(local_world_size, local_rank):
    env_dict = {key: os.environ[key] for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    print(f"[{os.getpid()}] Initializing process group with: {env_dict}")
    dist.init_process_group(backend="gloo")
    assert dist.get_world_size() == 4 and local_world_size == 4
    demo_basic(local_world_size, local_rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", "--local_rank", type=int,
                        default=int(os.environ.get("LOCAL_RANK", 0)))
    parser.add_argument("--local_world_size", type=int, default=1)
    args = parser.parse_args()
    assert args.local_rank == int(os.environ["LOCAL_RANK"])
    spmd_main(args.local_world_size, args.local_rank)
