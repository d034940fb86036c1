"""muster.DistributedSampler.state_dict / load_state_dict against an oracle,
without a daemon: W1 ranks each take k indices, the state is saved, W2 ranks
load it and drain the epoch. Together they use every index of the epoch
exactly once (torch's padding counted apart), and every rank's first k
indices (and a whole fresh pass) equal torch's DistributedSampler's."""
import os
import pickle
import random
import sys

try:
    import torch
    from torch.utils.data.distributed import DistributedSampler as TorchSampler
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

os.environ.pop("MUSTER_JOB_ID", None)  # computed here, exactly as torch does
from muster import DistributedSampler  # noqa: E402


def perm_of(n, seed, epoch, shuffle):
    if not shuffle:
        return list(range(n))
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    return torch.randperm(n, generator=g).tolist()


def interleave(lists):
    # Sampler order of a pass: position p is rank p % W's entry p // W.
    return [lst[j] for j in range(len(lists[0]) if lists else 0) for lst in lists]


def check(n, seed, epoch, w1, w2, k, shuffle, drop_last):
    what = f"n={n} seed={seed} epoch={epoch} W1={w1} W2={w2} k={k} " \
           f"shuffle={shuffle} drop_last={drop_last}"
    ds = range(n)
    kw = dict(shuffle=shuffle, seed=seed, drop_last=drop_last)
    perm = perm_of(n, seed, epoch, shuffle)
    firsts, states = [], []
    for r in range(w1):
        s = DistributedSampler(ds, num_replicas=w1, rank=r, **kw)
        s.set_epoch(epoch)
        ref = TorchSampler(ds, num_replicas=w1, rank=r, **kw)
        ref.set_epoch(epoch)
        want = list(ref)
        assert len(s) == len(ref) == len(want), what
        k = min(k, len(want))
        it = iter(s)
        got = [next(it) for _ in range(k)]
        assert got == want[:k], f"{what}: rank {r} first {k}: {got} != {want[:k]}"
        firsts.append(got)
        states.append(s.state_dict())
        assert s.state_dict(samples_done=k) == states[-1], what
    consumed = min(n, k * w1)
    state = pickle.loads(pickle.dumps(states[0]))
    assert all(st == state for st in states), f"{what}: ranks disagree: {states}"
    assert state["consumed"] == consumed and state["epoch"] == epoch, (what, state)
    assert state["dataset_size"] == n and state["seed"] == seed, (what, state)
    assert state["shuffle"] == shuffle and state["drop_last"] == drop_last, (what, state)
    before = interleave(firsts)
    assert before[:consumed] == perm[:consumed], what

    drained = []
    for r in range(w2):
        s = DistributedSampler(ds, num_replicas=w2, rank=r, **kw)
        s.load_state_dict(state)
        drained.append(list(s))
        assert len(drained[-1]) == len(drained[0]), what
        # The next epoch is torch's again.
        s.set_epoch(epoch + 1)
        ref = TorchSampler(ds, num_replicas=w2, rank=r, **kw)
        ref.set_epoch(epoch + 1)
        assert list(s) == list(ref), f"{what}: epoch after the resumed one"
    after = interleave(drained)
    m = n - consumed
    used = (m // w2) * w2 if drop_last else m
    assert len(after) == (used if drop_last else -(-m // w2) * w2), what
    assert after[:used] == perm[consumed:consumed + used], what
    seen = before[:consumed] + after[:used]
    assert len(seen) == len(set(seen)), f"{what}: an index used twice"
    if not drop_last:
        assert sorted(seen) == list(range(n)), f"{what}: not every index once"
    assert set(after[used:]) <= set(after[:used]), f"{what}: padding from outside the rest"


def main():
    rng = random.Random(24)
    cases = 0
    # The named cases: W2 > W1, W2 < W1, k = 0, k reaching the end, a dataset
    # smaller than W2, an empty dataset.
    for shuffle in (True, False):
        for drop_last in (False, True):
            for (n, w1, w2, k) in ((100, 2, 5, 7), (100, 6, 3, 9), (37, 3, 4, 0),
                                   (37, 4, 3, 10), (37, 4, 3, 99), (5, 2, 8, 1),
                                   (3, 1, 7, 0), (0, 2, 3, 0), (1, 3, 2, 1)):
                check(n, 5, 3, w1, w2, k, shuffle, drop_last)
                cases += 1
    for _ in range(600):
        n = rng.choice([rng.randrange(0, 12), rng.randrange(0, 300), rng.randrange(300, 3000)])
        w1, w2 = rng.randrange(1, 9), rng.randrange(1, 9)
        k = rng.choice([0, rng.randrange(0, n // w1 + 2), n])
        check(n, rng.randrange(0, 2**33), rng.randrange(0, 50), w1, w2, k,
              rng.random() < 0.8, rng.random() < 0.5)
        cases += 1

    # samples_done counts what training used, not what the iterator yielded.
    s = DistributedSampler(range(50), num_replicas=2, rank=0, seed=1)
    it = iter(s)
    for _ in range(10):
        next(it)
    assert s.state_dict()["consumed"] == 20 and s.state_dict(samples_done=4)["consumed"] == 8
    # Saved before iterating a loaded state: the loaded offset, unchanged.
    t = DistributedSampler(range(50), num_replicas=3, rank=1, seed=1)
    t.load_state_dict(s.state_dict(samples_done=4))
    assert t.state_dict()["consumed"] == 8 and len(t) == 14
    # A state of another permutation is refused.
    for key, value in (("dataset_size", 51), ("seed", 2), ("shuffle", False)):
        bad = dict(s.state_dict(), **{key: value})
        try:
            t.load_state_dict(bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"a state with another {key} was accepted")
    print(f"sampler resumption: {cases} cases, every index exactly once, torch's prefixes OK")


main()
