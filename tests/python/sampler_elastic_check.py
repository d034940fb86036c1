"""A resumable muster.DistributedSampler across an elastic re-form that lost
the committing node: a coordinator daemon and two node daemons on loopback,
one `muster run --nnodes 1:2 -n 2 --max-restarts 1` per node. In the first
generation (2 nodes, world 4) every rank uses K indices of an epoch, rank 0
(on node 0) alone commits, every rank runs a little further; then node 0 is
lost (its daemon and its launcher killed). Node 1 re-forms alone (world 2)
and drains the epoch with new samplers (resume=True): the indices used up to
the commit and those of the re-formed generation are every index of the
epoch exactly once (torch's padding apart). Node 1's daemon never saw the
commit: only the coordinator, to which it was forwarded, has it.
usage: sampler_elastic_check.py MUSTER MUSTERD WORKDIR."""
import collections
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

try:
    import torch
    from torch.utils.data.distributed import DistributedSampler as TorchSampler
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

N, SEED, EPOCH, K, AHEAD, NPROC = 1003, 11, 3, 50, 4, 2
W0 = 2 * NPROC  # the first generation's world: two nodes

PROGRAM = f'''import os, sys, time
import muster
from muster import DistributedSampler

out = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
sampler = DistributedSampler(range({N}), seed={SEED}, resume=True)
sampler.set_epoch({EPOCH})
with open(os.path.join(out, f"gen{{attempt}}-rank{{rank}}.txt"), "w") as log:
    log.write(f"world {{world}}\\n")
    if attempt == 0:
        it = iter(sampler)
        for _ in range({K}):
            log.write(f"{{next(it)}}\\n")
        muster.barrier("used")
        if rank == 0:  # any rank may commit: here only one on node 0 does
            sampler.commit(samples_done={K})
        muster.barrier("committed")
        for _ in range({AHEAD}):  # past the commit: lost with the node
            log.write(f"ahead {{next(it)}}\\n")
        log.flush()
        open(os.path.join(out, f"ready-rank{{rank}}"), "w").close()
        time.sleep(300)  # until node 0 is lost and the world re-forms
    else:
        for i in sampler:
            log.write(f"{{i}}\\n")
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(musterd, muster_cli, extra):
    rundir = tempfile.mkdtemp(prefix="muster-elastic-")
    endpoint = f"ipc://{rundir}/musterd.sock"
    p = subprocess.Popen([musterd, "--runtime-dir", rundir, "--log-level", "warning",
                          "--no-config", "--peer-plain", "--peer-timeout", "2"] + extra)
    env = dict(os.environ, MUSTER_ENDPOINT=endpoint)
    for _ in range(3000):  # generous: the suite runs tests in parallel on few cores
        if p.poll() is not None:
            sys.exit(f"musterd {extra} exited with {p.returncode}")
        if os.path.exists(f"{rundir}/musterd.sock") and subprocess.run(
                [muster_cli, "status"], env=env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL).returncode == 0:
            return p, endpoint
        time.sleep(0.01)
    sys.exit(f"musterd {extra} did not come up in {rundir}")


def read(path):
    used, ahead, world = [], [], None
    with open(path) as f:
        for line in f:
            if line.startswith("world "):
                world = int(line.split()[1])
            elif line.startswith("ahead "):
                ahead.append(int(line.split()[1]))
            else:
                used.append(int(line))
    return used, ahead, world


def wait_for(paths, procs, seconds):
    end = time.monotonic() + seconds
    while not all(os.path.exists(p) for p in paths):
        for p in procs:
            if p.poll() is not None:
                sys.exit(f"muster run {p.args} ended early with {p.returncode}")
        if time.monotonic() > end:
            sys.exit(f"timed out waiting for {paths}")
        time.sleep(0.05)


muster_cli, musterd, workdir = sys.argv[1:4]
os.makedirs(workdir, exist_ok=True)
for name in os.listdir(workdir):
    os.unlink(os.path.join(workdir, name))
script = os.path.join(workdir, "..", "sampler_elastic_worker.py")
with open(script, "w") as f:
    f.write(PROGRAM)

port = free_port()
daemons = [start_daemon(musterd, muster_cli,
                        ["--peer-bind", "127.0.0.1", "--peer-port", str(port)])]
daemons += [start_daemon(musterd, muster_cli, []) for _ in range(2)]
runs = []
try:
    for node in range(2):
        cmd = [muster_cli, "run", "--nnodes", "1:2", "-n", str(NPROC), "--coordinator",
               f"127.0.0.1:{port}", "--job-id", "elastic", "--cpu", "--local-addr", "127.0.0.1",
               "--node-rank", str(node), "--max-restarts", "1", "--grace-period", "1",
               "--last-call", "5", script, workdir]
        print("+", " ".join(cmd), flush=True)
        env = dict(os.environ, MUSTER_PYTHON=sys.executable, MUSTER_ENDPOINT=daemons[1 + node][1])
        with open(os.path.join(workdir, f"node{node}.log"), "w") as log:
            runs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    wait_for([os.path.join(workdir, f"ready-rank{r}") for r in range(W0)], runs, 120)
    # Node 0 is lost: its daemon (where rank 0 committed) and its launcher.
    daemons[1][0].send_signal(signal.SIGKILL)
    runs[0].send_signal(signal.SIGKILL)
    runs[1].wait(timeout=180)
    assert runs[1].returncode == 0, f"node 1's muster run ended with {runs[1].returncode}"
finally:
    for node in range(2):
        with open(os.path.join(workdir, f"node{node}.log")) as log:
            print(f"--- node {node}'s muster run:\n{log.read()}", flush=True)
    for p in runs:
        if p.poll() is None:
            p.kill()
        p.wait()
    for p, endpoint in daemons:
        if p.poll() is None:
            p.terminate()
        p.wait()
        shutil.rmtree(endpoint[len("ipc://"):].rsplit("/", 1)[0], ignore_errors=True)

g = torch.Generator()
g.manual_seed(SEED + EPOCH)
perm = torch.randperm(N, generator=g).tolist()
before, ahead = [], []
for r in range(W0):
    used, more, world = read(os.path.join(workdir, f"gen0-rank{r}.txt"))
    assert world == W0, (r, world)
    ref = TorchSampler(range(N), num_replicas=W0, rank=r, seed=SEED)
    ref.set_epoch(EPOCH)
    assert used == list(ref)[:K], f"rank {r}'s first {K} are not torch's"
    before.append(used)
    ahead += more
consumed = K * W0
assert [x for j in range(K) for x in (b[j] for b in before)] == perm[:consumed]
W1 = NPROC  # node 1 alone
after = []
for r in range(W1):
    used, _, world = read(os.path.join(workdir, f"gen1-rank{r}.txt"))
    assert world == W1, f"the re-formed world has {world} ranks, not {W1}"
    after.append(used)
assert not os.path.exists(os.path.join(workdir, f"gen1-rank{W1}.txt")), "node 0 came back"
rest = [lst[j] for j in range(len(after[0])) for lst in after]
m = N - consumed
assert len(rest) == -(-m // W1) * W1, f"{len(rest)} indices after the re-form, not the rest"
assert rest[:m] == perm[consumed:], "the re-formed generation did not take the rest in order"
counts = collections.Counter(sum(before, []) + rest[:m])
assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}, "not exactly once"
padding = rest[m:]
assert padding == perm[consumed:consumed + len(padding)], "padding is torch's (from the rest)"
assert set(ahead) <= set(rest[:m]) and len(ahead) == AHEAD * W0, "past the commit: served again"
print(f"resumed after losing node 0: {consumed} used before rank 0's commit + {m} after on "
      f"node 1 alone = all {N} once ({len(padding)} padding, {len(ahead)} served again)")
