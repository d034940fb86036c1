"""init_torch on a GPU lease, with torch.cuda behind a seam (this torch is
CPU-only): `python3 THIS MUSTERD MUSTER NVML_DOUBLE WORKDIR` starts a
private musterd on the NVML double and runs one-rank jobs of THIS --worker
CASE under `muster run`. The rank's device_uuid is the leased GPU's; a CUDA
device with another UUID fails loudly; a torch without CUDA fails loudly
instead of falling back to gloo; backend="gloo" is the way to the CPU."""
import os
import subprocess
import sys
import time
import types

UUIDS = ["GPU-6b1e2c3d-0000-4000-8000-00000000000" + str(i) for i in range(2)]


def worker(case):
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
        sys.exit(77)
    import muster
    import muster.distributed as md

    me = muster.rank_info()
    assert me.device == 0, me
    assert me.device_uuid == UUIDS[0], me
    assert f"device_uuid='{UUIDS[0]}'" in repr(me), repr(me)
    calls = []
    # torch.distributed itself is not brought up: only the choice matters.
    dist.init_process_group = lambda backend, **kw: calls.append(("init", backend))
    if case in ("match", "mismatch"):
        opened = UUIDS[0] if case == "match" else UUIDS[1]
        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: 2
        # torch's _CUuuid prints the bare UUID, without "GPU-".
        torch.cuda.get_device_properties = lambda d: types.SimpleNamespace(
            uuid=opened[4:].upper() if d == 0 else "ffffffff-0000-0000-0000-000000000000")
        torch.cuda.set_device = lambda d: calls.append(("set_device", d))
    try:
        backend = md.init_torch()
    except RuntimeError as e:
        print(f"REFUSED {e}")
        backend = None
    if case == "match":
        assert backend == "gloo" and ("set_device", 0) in calls, (backend, calls)  # no NCCL here
    elif case == "mismatch":
        assert backend is None and not calls, calls
    elif case == "nocuda":
        assert backend is None and not calls, (backend, calls)
        assert md.init_torch("gloo") == "gloo" and calls == [("init", "gloo")], calls
    print(f"OK {case}")


def driver(musterd, cli, double, work):
    os.makedirs(work, exist_ok=True)
    runtime = os.path.join(work, "runtime")
    os.makedirs(runtime, exist_ok=True)
    scenario = os.path.join(work, "scenario")
    with open(scenario, "w") as f:
        for i, u in enumerate(UUIDS):
            f.write(f"gpu uuid={u} bus=00000000:{0x18 + i:02X}:00.0\n")
    env = dict(os.environ, MUSTER_NVML_LIBRARY=double, MUSTER_NVML_SCENARIO=scenario,
               MUSTER_TEST_SYSROOT=os.path.join(work, "root"))
    sock = os.path.join(runtime, "musterd.sock")
    if os.path.exists(sock):
        os.unlink(sock)
    d = subprocess.Popen([musterd, "--runtime-dir", runtime, "--no-config", "--log-level",
                          "warning"], env=env)
    try:
        for _ in range(300):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        env["MUSTER_ENDPOINT"] = "ipc://" + sock
        failed = 0
        for case, want in (("match", "OK match"), ("mismatch", "not the leased GPU"),
                           ("nocuda", "cannot open it")):
            p = subprocess.run([cli, "run", "-n", "1", "--", sys.executable, __file__, "--worker",
                                case], env=env, capture_output=True, text=True, timeout=120)
            out = p.stdout + p.stderr
            if "SKIP:" in out:
                print(out)
                return 77
            ok = p.returncode == 0 and want in out and f"OK {case}" in out
            print(("PASS " if ok else "FAIL ") + case + ("" if ok else ":\n" + out))
            failed += not ok
        return 1 if failed else 0
    finally:
        d.terminate()
        d.wait(30)


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        sys.exit(driver(*sys.argv[1:5]))
