"""DistributedSampler: a drop-in for torch.utils.data.distributed.DistributedSampler
whose indices musterd computes (once per epoch for all ranks of the node), and
which can stop mid-epoch and resume under the same or another world size with
every index of the epoch used exactly once (state_dict / load_state_dict)."""
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
    indices here, exactly as torch does.

    resume=True (under ``muster run``): ``commit()`` records this epoch's
    progress with the daemon, and after a restart or an elastic resize of the
    same run a new sampler with the same dataset size and seed continues the
    epoch ``set_epoch`` names from the last commit instead of replaying it.
    Indices between the last commit and a failure are served again: commit
    where you checkpoint for exactly-once training. ``commit_every=N``
    also commits every N indices this rank's iterator yields (which runs ahead
    of training when a DataLoader prefetches). A new launch resumes only from
    your checkpoint, through ``load_state_dict``."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False, resume=False, commit_every=None):
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
        # Resumption: the pass of this epoch starts at offset _start of the
        # epoch's permutation when _armed (load_state_dict), else at 0;
        # _yielded counts what this rank's iterator handed out of that pass.
        self._start = 0
        self._armed = False
        self._yielded = 0
        # With resume, the daemon is asked once per epoch for a commit of this run.
        self._resume = bool(resume) and served
        self._asked_epoch = None
        if commit_every is not None and commit_every < 1:
            raise ValueError(f"commit_every must be at least 1, not {commit_every}")
        self._commit_every = commit_every if resume else None

    def set_epoch(self, epoch):
        """Like torch's: call before each epoch for a different shuffle. Another
        epoch than the current one starts fresh (torch's indices again); the
        same epoch keeps a loaded state."""
        if epoch != self.epoch:
            self._start, self._armed, self._yielded = 0, False, 0
        self.epoch = epoch

    def state_dict(self, samples_done=None):
        """Where this epoch stands, as a small picklable dict (no daemon call).

        ``samples_done``: how many indices this rank's training loop used in the
        current pass (every rank the same). When omitted, the count this rank's
        iterator yielded is used, which runs ahead of training when a DataLoader
        prefetches: pass the loop's own count for exactly-once training."""
        n = len(self.dataset)
        k = self._yielded if samples_done is None else int(samples_done)
        if k < 0:
            raise ValueError(f"samples_done must not be negative, not {k}")
        return {
            "version": 1, "epoch": self.epoch, "seed": self.seed, "dataset_size": n,
            "shuffle": self.shuffle, "drop_last": self.drop_last,
            "num_replicas": self.num_replicas,
            "consumed": consumed_after(n, self._start, k, self.num_replicas),
        }

    def load_state_dict(self, state):
        """Continue the epoch of ``state`` (from state_dict(), under any world
        size): the next pass yields exactly the indices not consumed yet, shared
        among this sampler's ranks the way torch shares a whole epoch."""
        n = len(self.dataset)
        for key, mine in (("dataset_size", n), ("seed", self.seed), ("shuffle", self.shuffle)):
            if key not in state or state[key] != mine:
                raise ValueError(f"state has {key}={state.get(key)!r}, this sampler {mine!r}: "
                                 "the epoch's permutation would differ")
        consumed = int(state["consumed"])
        if not 0 <= consumed <= n:
            raise ValueError(f"state's consumed {consumed} is outside [0, {n}]")
        self.epoch = int(state["epoch"])
        self._start, self._armed, self._yielded = consumed, True, 0

    def commit(self, samples_done=None):
        """Records this epoch's progress (``state_dict(samples_done)``) with the
        daemon for later generations of this run, and returns that state. Any
        rank may commit; the last commit wins (for a job that spans nodes the
        record is kept by the job's coordinator, so it survives losing a node). Without resume=True (or outside
        ``muster run``) it records nothing."""
        state = self.state_dict(samples_done)
        if self._resume:
            muster.client().sampler_commit(state["dataset_size"], state["epoch"], self.seed,
                                           self.shuffle, self.drop_last, state["consumed"])
        return state

    def _resume_point(self):
        # The epoch's first pass in this process continues a commit of this run.
        if not self._resume or self._asked_epoch == self.epoch:
            return 0
        self._asked_epoch = self.epoch
        place = muster.client().sampler_resume(len(self.dataset), self.seed, self.shuffle)
        if place is None or place[0] != self.epoch:
            return 0
        return place[1]

    def indices(self):
        """This rank's indices for the next pass of the current epoch (a list of
        int): torch's, or the rest of a loaded epoch."""
        return self._indices_at(self._start if self._armed else 0)

    def _indices_at(self, consumed):
        n = len(self.dataset)
        if self._served:
            return muster.client().sampler_shard(n, self.epoch, self.seed, self.shuffle,
                                                 self.drop_last, consumed=consumed)
        return self._local_indices(n, consumed)

    def _local_indices(self, n, consumed=0):
        # torch's algorithm over perm[consumed:], for ranks the daemon does not know.
        if self.shuffle:
            import torch
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            idx = torch.randperm(n, generator=g).tolist()
        else:
            idx = list(range(n))
        idx = idx[consumed:]
        total = _shard_size(len(idx), self.num_replicas, self.drop_last) * self.num_replicas
        if not self.drop_last:
            pad = total - len(idx)
            if pad <= len(idx):
                idx += idx[:pad]
            else:
                idx += (idx * math.ceil(pad / len(idx)))[:pad]
        else:
            idx = idx[:total]
        return idx[self.rank:total:self.num_replicas]

    def __iter__(self):
        start = self._start if self._armed else self._resume_point()
        self._start, self._armed, self._yielded = start, False, 0
        return self._counted(self._indices_at(start))

    def _counted(self, idx):
        every = self._commit_every
        for i in idx:
            self._yielded += 1
            if every and self._yielded % every == 0:
                self.commit()
            yield i

    def __len__(self):
        start = self._start
        return _shard_size(len(self.dataset) - start, self.num_replicas, self.drop_last)


def _shard_size(m, world, drop_last):
    # torch's num_samples for m indices over world ranks.
    if drop_last and m % world != 0:
        return m // world
    return -(-m // world)


def consumed_after(n, start, per_rank, world):
    """``consumed`` once each of ``world`` ranks used ``per_rank`` indices of a
    pass that began at offset ``start``: min(n, start + per_rank * world)."""
    return min(n, start + per_rank * world)
