"""The check both DDP programs end with: every rank holds the same final
parameters (DDP averaged the gradients of different data), and they moved
from where training started."""
import torch
import torch.distributed as dist


def flat_parameters(model):
    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])


def assert_ranks_agree(model, start):
    """start: flat_parameters before training (after DDP's broadcast)."""
    mine = flat_parameters(model)
    assert not torch.equal(mine, start), "training did not change the parameters"
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    for rank, theirs in enumerate(everyone):
        assert torch.allclose(theirs, everyone[0], rtol=0, atol=1e-9), \
            f"rank {rank}'s parameters differ from rank 0's by {(theirs - everyone[0]).abs().max()}"
    return mine


def train_tiny_ddp(lr, steps=5):
    """A few DDP steps of a small linear model, each rank starting from its
    own random weights and training on its own data, then the check above:
    what a real script does between init_process_group and the end."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank = dist.get_rank()
    torch.manual_seed(1000 + rank)  # different start: DDP's broadcast must fix it
    model = DDP(torch.nn.Linear(8, 4))
    start = flat_parameters(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        x, y = torch.randn(16, 8), torch.randn(16, 4)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return assert_ranks_agree(model, start)
