"""Runs examples/python/pretrain.py as a 4-rank job and checks its outcome:
usage: pretrain_check.py MUSTER EXAMPLE WORKDIR [--no-use-env].

The job must succeed, the checkpoint must exist, be written once (by the
master) and load; only the local master logs; training must have learnt."""
import os
import subprocess
import sys

try:
    import torch
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

muster_cli, example, workdir = sys.argv[1:4]
use_env = "--no-use-env" not in sys.argv[4:]
os.makedirs(workdir, exist_ok=True)
ckpt = os.path.join(workdir, "checkpoint.pt")
if os.path.exists(ckpt):
    os.unlink(ckpt)
env = dict(os.environ, MUSTER_PYTHON=sys.executable)
cmd = [muster_cli, "run", "-n", "4", "--cpu"]
cmd += ["--use-env", sys.executable, example] if use_env else [example]
cmd += ["--epochs", "4", "--checkpoint", ckpt]
print("+", " ".join(cmd), flush=True)
p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                   timeout=240)
print(p.stdout)
assert p.returncode == 0, f"the job failed with {p.returncode}"
lines = p.stdout.splitlines()
written = [ln for ln in lines if "checkpoint written" in ln]
# muster run prefixes every worker line with "[rankN]: ", naming who printed it.
assert len(written) == 1 and written[0].startswith("[rank0]: "), written
epochs = [ln for ln in lines if " epoch " in ln]
assert len(epochs) == 4 and all(ln.startswith("[rank0]: ") for ln in epochs), \
    f"only the (one) local master logs, once per epoch: {epochs}"
state = torch.load(ckpt)
assert state["world_size"] == 4 and state["epochs"] == 4
last = float(epochs[-1].split("accuracy ")[1].split()[0])
assert last > 0.9, f"training did not learn: accuracy {last}"
print(f"pretrain example OK: one checkpoint, accuracy {last}")
