"""muster: rank bookkeeping, a key/value store, model broadcast and sampler
shards served by the node's musterd, and the PyTorch glue on top.

In a process started by ``muster run``::

    import muster
    muster.init_torch()                 # torch.distributed through musterd's store
    model = Net().to(device)
    muster.sync_model(model)            # every rank holds rank 0's weights
    sampler = muster.DistributedSampler(dataset)
    if muster.is_local_master(): print("logging")
    if muster.is_master(): torch.save(...)

``muster.client()`` is this process's ``Client`` (joined from ``muster run``'s
environment on first use); every failure raises ``muster.Error`` with
``.code`` (int) and ``.name`` (e.g. ``"timeout"``).
"""
import os
import threading

from ._muster import ERROR_CODES, Client, Error, RankInfo, error_name  # noqa: F401
from ._muster import __version__  # noqa: F401

__all__ = [
    "Client", "Error", "RankInfo", "ERROR_CODES", "error_name", "client", "under_muster",
    "rank_info", "is_master", "is_local_master", "barrier", "broadcast", "sampler_shard",
    "nccl_unique_id", "init_torch", "sync_model", "DistributedSampler",
]

_lock = threading.Lock()
_client = None
_client_pid = None


def under_muster():
    """True when this process was started by ``muster run`` (or names a job)."""
    return bool(os.environ.get("MUSTER_JOB_ID"))


def client():
    """This process's Client, joined to its job on first use (from the
    environment ``muster run`` sets). A forked child gets its own."""
    global _client, _client_pid
    with _lock:
        if _client is None or _client_pid != os.getpid():
            c = Client()
            c.join_from_env()
            _client, _client_pid = c, os.getpid()
        return _client


def rank_info():
    """RankInfo(job, rank, local_rank, world_size, local_world_size, node_rank,
    num_nodes, device, device_uuid, generation) from the daemon; device_uuid
    is the leased GPU's UUID ("GPU-...", as nvidia-smi -L writes it), "" for
    a rank without a GPU."""
    return client().rank_info


def is_master():
    """True on the global master (rank 0). Outside ``muster run``: from RANK
    (a single process is the master)."""
    if not under_muster():
        return int(os.environ.get("RANK", "0")) == 0
    return client().is_master()


def is_local_master():
    """True on the node's local master (local rank 0). Outside ``muster run``:
    from LOCAL_RANK."""
    if not under_muster():
        return int(os.environ.get("LOCAL_RANK", "0")) == 0
    return client().is_local_master()


def barrier(name="default", timeout=None):
    """Returns when every rank of the job has called barrier(name)."""
    client().barrier(name, timeout)


def broadcast(buffer, root=0):
    """Every rank ends with root's bytes of ``buffer``: a writable contiguous
    buffer (bytearray, numpy array) or a CPU tensor (changed in place)."""
    if type(buffer).__module__.startswith("torch"):
        from .distributed import _broadcast_tensor
        _broadcast_tensor(buffer, root)
    else:
        client().broadcast(buffer, root)


def sampler_shard(dataset_size, epoch=0, seed=0, shuffle=True, drop_last=False, as_numpy=False):
    """This rank's DistributedSampler indices (a list, or an int64 numpy array)."""
    return client().sampler_shard(dataset_size, epoch, seed, shuffle, drop_last, as_numpy)


def nccl_unique_id(name="world", timeout=None):
    """The 128-byte NCCL unique id of communicator ``name`` (bytes)."""
    return client().nccl_unique_id(name, timeout)


def __getattr__(name):
    # The PyTorch parts load on first use, so `import muster` works without torch.
    if name in ("init_torch", "sync_model", "MusterStore", "StoreTimeout"):
        from . import distributed
        return getattr(distributed, name)
    if name == "DistributedSampler":
        from .sampler import DistributedSampler
        return DistributedSampler
    raise AttributeError(f"module 'muster' has no attribute '{name}'")
