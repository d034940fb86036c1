"""A rank whose main is wrapped in torch's @record fails with its stderr
silenced: muster run's summary must name the exception torch wrote to
TORCHELASTIC_ERROR_FILE, where it was raised and the rank, root cause first.
usage: record_check.py MUSTER WORKDIR."""
import os
import subprocess
import sys

try:
    import torch  # noqa: F401
    from torch.distributed.elastic.multiprocessing.errors import record  # noqa: F401
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

PROGRAM = '''import os, sys, time
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    if os.environ["RANK"] == "1":
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        sys.stderr = open(os.devnull, "w")
        raise ValueError("boom from rank 1")
    time.sleep(60)


if __name__ == "__main__":
    main()
'''

muster_cli, workdir = sys.argv[1:3]
os.makedirs(workdir, exist_ok=True)
script = os.path.join(workdir, "record_fails.py")
with open(script, "w") as f:
    f.write(PROGRAM)
cmd = [muster_cli, "run", "-n", "2", "--cpu", "--grace-period", "1", script]
print("+", " ".join(cmd), flush=True)
p = subprocess.run(cmd, env=dict(os.environ, MUSTER_PYTHON=sys.executable),
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
print(p.stdout)
assert p.returncode == 1, p.returncode
summary = p.stdout[p.stdout.index("Root cause (first observed failure):"):]
assert summary.index("Root cause") < summary.index("Attempts:")
assert "  rank      : 1 (local rank 1), attempt 0\n" in summary, summary
assert "  error     : ValueError: boom from rank 1\n" in summary, summary
assert f'  raised at : File "{script}", line 11, in main\n' in summary, summary
assert "    (no stderr output)" in summary, "the rank's stderr was silent"
print("the @record error is the root cause")
