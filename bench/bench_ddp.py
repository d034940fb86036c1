#!/usr/bin/env python3
"""Wall time of one 4-rank CPU DDP program (tests/python/ddp_example.py,
gloo, shaped like pytorch/examples' distributed/ddp/example.py) from launch
to exit: under `muster run -n 4 --cpu` and under torch's own launcher
(`python3 -m torch.distributed.run --standalone --nproc_per_node 4`, through
torchrun_patched.py). Each side runs RUNS times, alternating; prints

    bench ddp_example_4ranks muster_s=M anchor_s=A ratio=M/A
        muster_min=.. muster_max=.. anchor_min=.. anchor_max=.. runs=N

(medians, then the range), and the same for `muster run --no-store-relay`
(every worker binds or dials MASTER_PORT itself, as under torchrun) as

    bench ddp_example_4ranks_no_relay muster_s=M ...

so the relay's part shows beside the anchor in one run. Usage:
bench_ddp.py MUSTER PYTHON DDP_EXAMPLE"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = 3


def timed(cmd, env):
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    s = time.perf_counter() - t
    if p.returncode != 0 or "parameters agree on all 4 ranks" not in p.stdout + p.stderr:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return s


def main():
    muster, python, program = sys.argv[1:4]
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"SKIP: {python} cannot import torch")
        sys.exit(77)
    here = os.path.dirname(os.path.abspath(__file__))
    args = [program, "--local_world_size", "4"]
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as runtime:
        # A private embedded daemon, as a user without musterd gets.
        env = dict(os.environ, MUSTER_RUNTIME_DIR=runtime, MUSTER_ENDPOINT="")
        env.pop("OMP_NUM_THREADS", None)  # both launchers set 1 for 4 ranks
        mine, direct, anchor = [], [], []
        for _ in range(RUNS):
            mine.append(timed([muster, "run", "-n", "4", "--cpu", python] + args, env))
            anchor.append(timed([python, os.path.join(here, "torchrun_patched.py"), "--standalone",
                                 "--nproc_per_node", "4"] + args, env))
            direct.append(timed([muster, "run", "--no-store-relay", "-n", "4", "--cpu", python]
                                + args, env))
    a = statistics.median(anchor)
    for name, times in (("ddp_example_4ranks", mine), ("ddp_example_4ranks_no_relay", direct)):
        m = statistics.median(times)
        print(f"bench {name} muster_s={m:.3f} anchor_s={a:.3f} ratio={m / a:.3f} "
              f"muster_min={min(times):.3f} muster_max={max(times):.3f} "
              f"anchor_min={min(anchor):.3f} anchor_max={max(anchor):.3f} runs={RUNS}")


if __name__ == "__main__":
    main()
