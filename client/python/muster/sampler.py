"""DistributedSampler: a drop-in for torch.utils.data.distributed.DistributedSampler
whose indices musterd computes (once per epoch for all ranks of the node)."""
import math

import muster

try:
    from torch.utils.data import Sampler as _Base
except ImportError:  # usable without torch: any object with __len__ works
    _Base = object

__all__ = ["DistributedSampler"]


class DistributedSampler(_Base):
    """Same arguments, same indices as torch's DistributedSampler.

    num_replicas and rank default to the job's (from musterd). Passing other
    values than the job's (or running outside ``muster run``) computes the
    indices here, exactly as torch does."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        served = muster.under_muster()
        if served:
            info = muster.client().rank_info
            job_world, job_rank = info.world_size, info.rank
        else:
            import os
            job_world = int(os.environ.get("WORLD_SIZE", "1"))
            job_rank = int(os.environ.get("RANK", "0"))
        if num_replicas is None:
            num_replicas = job_world
        if rank is None:
            rank = job_rank
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be at least 1, not {num_replicas}")
        if rank >= num_replicas or rank < 0:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.seed = seed
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self._served = served and num_replicas == job_world and rank == job_rank

    def set_epoch(self, epoch):
        """Like torch's: call before each epoch for a different shuffle."""
        self.epoch = epoch

    def indices(self):
        """This rank's indices for the current epoch (a list of int)."""
        n = len(self.dataset)
        if self._served:
            return muster.client().sampler_shard(n, self.epoch, self.seed, self.shuffle,
                                                 self.drop_last)
        return self._local_indices(n)

    def _local_indices(self, n):
        # torch's algorithm, for ranks the daemon does not know.
        if self.shuffle:
            import torch
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            idx = torch.randperm(n, generator=g).tolist()
        else:
            idx = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(idx)
            if pad <= len(idx):
                idx += idx[:pad]
            else:
                idx += (idx * math.ceil(pad / len(idx)))[:pad]
        else:
            idx = idx[:self.total_size]
        return idx[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(self.indices())

    def __len__(self):
        return self.num_samples
