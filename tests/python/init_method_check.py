"""torch's test_init_method_tcp_with_torchelastic (test/distributed/launcher/
run_test.py) under `muster run`, with torchrun beside it where this
machine's torch launcher runs: --master_port=P and every worker's
init_method=tcp://localhost:P, so rank 0 binds P itself. Then env:// on the
same command line, which goes through the store relay. Usage:
init_method_check.py MUSTER PYTHON"""
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "init_method_worker.py")
TORCHRUN = os.path.join(HERE, "..", "..", "bench", "torchrun_patched.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(cmd, env):
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    except subprocess.TimeoutExpired as e:
        return 124, f"timed out: {e.stdout}\n{e.stderr}"
    return p.returncode, p.stdout + p.stderr


def main():
    muster, python = sys.argv[1:3]
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"SKIP: {python} cannot import torch")
        sys.exit(77)
    env = dict(os.environ, MUSTER_PYTHON=python)
    failed = False
    for init in ("tcp", "env"):
        port = free_port()
        method = f"tcp://localhost:{port}" if init == "tcp" else "env://"
        # torch's test's arguments, as it passes them to its launcher.
        args = ["--nnodes=1", "--nproc_per_node=4", f"--master_port={port}",
                "--monitor_interval=1", "--start_method=spawn", WORKER, f"--init_method={method}"]
        code, out = launch([muster, "run", "--cpu"] + args, env)
        done = out.count("done via")
        print(f"muster run, init_method={method}: exit {code}, {done} of 4 ranks done")
        if code != 0 or done != 4:
            print(out)
            failed = True
        # The same under torch's own launcher, for comparison (not a failure
        # of muster's when this torch's launcher cannot run here).
        code, out = launch([python, TORCHRUN] + args, env)
        print(f"torchrun, init_method={method}: exit {code}, {out.count('done via')} of 4 ranks "
              "done" + ("" if code == 0 else f"\n{out[-2000:]}"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
