"""muster.DistributedSampler under `muster run -n 4 --use-env /usr/bin/python3 THIS`:
the same indices as torch's DistributedSampler, and the shards together cover
the dataset."""
import sys

try:
    import torch
    from torch.utils.data.distributed import DistributedSampler as TorchSampler
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

import muster
from muster import DistributedSampler

c = muster.client()
rank, world = c.rank_info.rank, c.rank_info.world_size
assert world == 4
assert isinstance(DistributedSampler(range(3)), torch.utils.data.Sampler)

cases = 0
for n in (1, 3, 4, 10, 101, 1000):
    for shuffle in (True, False):
        for drop_last in (False, True):
            for seed in (0, 7):
                ds = list(range(n))
                ours = DistributedSampler(ds, shuffle=shuffle, seed=seed, drop_last=drop_last)
                ref = TorchSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed,
                                   drop_last=drop_last)
                assert ours.num_replicas == world and ours.rank == rank
                for epoch in (0, 1, 5):
                    ours.set_epoch(epoch)
                    ref.set_epoch(epoch)
                    got, want = list(ours), list(ref)
                    assert len(ours) == len(ref) == len(got), (n, len(ours), len(ref), len(got))
                    assert got == want, f"n={n} shuffle={shuffle} drop_last={drop_last} " \
                        f"seed={seed} epoch={epoch}: {got[:8]} != {want[:8]}"
                    assert all(type(i) is int for i in got)
                    key = f"cover/{n}/{shuffle}/{drop_last}/{seed}/{epoch}"
                    c.set(f"{key}/{rank}", ",".join(map(str, got)))
                    if rank == 0:
                        union = []
                        for r in range(world):
                            s = c.get(f"{key}/{r}").decode()
                            union += [int(x) for x in s.split(",")] if s else []
                        if drop_last:
                            assert len(set(union)) == len(union) == (n // world) * world
                        else:
                            assert set(union) == set(range(n)), key
                    cases += 1
# Explicit num_replicas/rank other than the job's: computed locally, still torch's.
ds = list(range(50))
for r in range(3):
    assert list(DistributedSampler(ds, num_replicas=3, rank=r, seed=3)) == \
        list(TorchSampler(ds, num_replicas=3, rank=r, seed=3))
# A DataLoader takes it as torch's.
dl = torch.utils.data.DataLoader(torch.arange(40), batch_size=5,
                                 sampler=DistributedSampler(torch.arange(40), seed=1))
got = torch.cat(list(dl)).tolist()
assert got == list(TorchSampler(torch.arange(40), num_replicas=world, rank=rank, seed=1)), got
arr = muster.sampler_shard(1000, epoch=2, seed=1, as_numpy=True)
ref = TorchSampler(range(1000), num_replicas=world, rank=rank, seed=1)
ref.set_epoch(2)
assert arr.dtype.name == "int64" and arr.tolist() == list(ref)
# A resumed epoch served by the daemon: the rest of the permutation, as the
# local computation (checked against an oracle in sampler_resume_oracle.py).
for n, consumed, drop_last in ((1000, 0, False), (1000, 333, False), (1000, 998, True),
                               (1000, 1000, False), (7, 5, False)):
    s = DistributedSampler(range(n), seed=3, drop_last=drop_last)
    assert s._served
    s.load_state_dict(dict(s.state_dict(), epoch=4, consumed=consumed))
    got = list(s)
    assert got == s._local_indices(n, consumed), (n, consumed, drop_last, got[:8])
    assert len(got) == len(s) or consumed == 0
c.barrier("done")
if rank == 0:
    print(f"DistributedSampler: {cases} cases equal torch's on {world} ranks OK")
