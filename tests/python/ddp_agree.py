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
