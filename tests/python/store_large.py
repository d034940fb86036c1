"""Large values and long keys through MusterStore and torch's PrefixStore,
as programs put pickled objects and large configs into torch's TCPStore:
under `muster run -n 4 --cpu THIS` (issue 46). A 64 MiB value and a 60 KiB
key pass; past muster's limits the error says which limit, and the job's
store quota names the musterd option that raises it."""
import os
import pickle
import sys
from datetime import timedelta

try:
    import torch  # noqa: F401
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

import muster

MiB = 1 << 20
rank = int(os.environ["RANK"])
store = muster.MusterStore(prefix="large/")
store.set_timeout(timedelta(seconds=60))
prefixed = dist.PrefixStore("p", store)

big = bytes(range(256)) * (64 * MiB // 256)  # 64 MiB, not one repeated byte
long_key = "k" * (60 << 10)
config = {"layers": list(range(200000)), "name": "x" * 1000}
if rank == 0:
    store.set("big", big)
    prefixed.set(long_key, "long")
    store.set("config", pickle.dumps(config))
got = store.get("big")
assert got == big, (len(got), len(big))
assert prefixed.get(long_key) == b"long"
assert pickle.loads(store.get("config")) == config
del got
muster.barrier("read")

if rank == 0:
    def refused(call, *words):
        try:
            call()
        except (RuntimeError, muster.Error) as e:
            for w in words:
                assert w in str(e), (w, str(e))
            print(f"refused as it should be: {e}")
            return
        raise AssertionError("accepted past muster's limit")

    # One byte past the value limit: too large, with the limit named.
    refused(lambda: store.set("bigger", big + b"x"), "67108864", "protocol")
    refused(lambda: store.set("k" * (64 << 10) + "k", "v"), "65536", "protocol")
    # The job's store quota (256 MiB by default): named with its option.
    for i in range(2):
        store.set(f"fill{i}", big)
    refused(lambda: store.set("fill2", big), "--max-store-bytes")
    for i in range(2):
        store.delete_key(f"fill{i}")
muster.barrier("done")
print(f"rank {rank}: a 64 MiB value and a 60 KiB key passed")
