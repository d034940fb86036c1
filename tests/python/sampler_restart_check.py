"""A resumable muster.DistributedSampler across an in-run restart: under
`muster run -n 2 --max-restarts 1`, both ranks use K indices of an epoch,
commit, run a little further, and rank 1 dies; the restarted generation
(new processes, new samplers, resume=True) finishes the epoch. The indices
used up to the commit and those of the restarted generation are every index
of the epoch exactly once (torch's padding apart); those used after the
commit are served again. usage: sampler_restart_check.py MUSTER WORKDIR."""
import collections
import os
import subprocess
import sys

try:
    import torch
    from torch.utils.data.distributed import DistributedSampler as TorchSampler
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

N, SEED, EPOCH, K, AHEAD, W = 1003, 7, 2, 60, 5, 2

PROGRAM = f'''import os, sys, time
import muster
from muster import DistributedSampler

out = sys.argv[1]
rank, attempt = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
sampler = DistributedSampler(range({N}), seed={SEED}, resume=True)
sampler.set_epoch({EPOCH})
with open(os.path.join(out, f"gen{{attempt}}-rank{{rank}}.txt"), "w") as log:
    if attempt == 0:
        it = iter(sampler)
        for _ in range({K}):
            log.write(f"{{next(it)}}\\n")
        muster.barrier("used")
        sampler.commit(samples_done={K})
        muster.barrier("committed")
        for _ in range({AHEAD}):  # past the commit: lost with the failure
            log.write(f"ahead {{next(it)}}\\n")
        log.flush()
        if rank == 1:
            os._exit(3)
        time.sleep(120)
    else:
        for i in sampler:
            log.write(f"{{i}}\\n")
'''


def read(path):
    used, ahead = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("ahead "):
                ahead.append(int(line.split()[1]))
            else:
                used.append(int(line))
    return used, ahead


muster_cli, workdir = sys.argv[1:3]
os.makedirs(workdir, exist_ok=True)
for name in os.listdir(workdir):
    os.unlink(os.path.join(workdir, name))
script = os.path.join(workdir, "..", "sampler_restart_worker.py")
with open(script, "w") as f:
    f.write(PROGRAM)
cmd = [muster_cli, "run", "-n", str(W), "--cpu", "--max-restarts", "1", "--grace-period", "1",
       script, workdir]
print("+", " ".join(cmd), flush=True)
p = subprocess.run(cmd, env=dict(os.environ, MUSTER_PYTHON=sys.executable),
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
print(p.stdout)
assert p.returncode == 0, p.returncode

g = torch.Generator()
g.manual_seed(SEED + EPOCH)
perm = torch.randperm(N, generator=g).tolist()
before, after, ahead = [], [], []
for r in range(W):
    used, more = read(os.path.join(workdir, f"gen0-rank{r}.txt"))
    ref = TorchSampler(range(N), num_replicas=W, rank=r, seed=SEED)
    ref.set_epoch(EPOCH)
    assert used == list(ref)[:K], f"rank {r}'s first {K} are not torch's"
    before.append(used)
    ahead += more
    after.append(read(os.path.join(workdir, f"gen1-rank{r}.txt"))[0])
consumed = K * W
assert [x for j in range(K) for x in (b[j] for b in before)] == perm[:consumed]
rest = [lst[j] for j in range(len(after[0])) for lst in after]
m = N - consumed
assert len(rest) == -(-m // W) * W, len(rest)
assert rest[:m] == perm[consumed:], "the restarted generation did not take the rest in order"
counts = collections.Counter(sum(before, []) + rest[:m])
assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}, "not exactly once"
padding = rest[m:]
assert padding == perm[consumed:consumed + len(padding)], "padding is torch's (from the rest)"
assert set(ahead) <= set(rest[:m]) and len(ahead) == AHEAD * W, "past the commit: served again"
print(f"resumed after a crash: {consumed} used before the commit + {m} after = all {N} once "
      f"({len(padding)} padding, {len(ahead)} used past the commit served again)")
