"""PyTorch glue: a torch.distributed.Store backed by musterd, init_torch and
sync_model (the seed's enot.distributed calls, same names and meaning)."""
import datetime
import itertools
import os

import torch
import torch.distributed as dist

import muster

__all__ = ["MusterStore", "StoreTimeout", "init_torch", "sync_model"]

# init_torch is a collective: every rank calls it as often as the others,
# so its n-th call names the same key space on every rank (a re-init after
# destroy_process_group starts afresh). Stores the program makes itself are
# named by their prefix alone: a store made on some ranks only must not
# shift the key space of the stores made after it.
_init_count = itertools.count()


def _ms(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _bytes(v):
    # torch's PrefixStore hands values on as lists of ints (std::vector<uint8_t>).
    return bytes(v) if isinstance(v, list) else v


# What a store wait that ran out of time raises: what torch raises there
# (DistStoreError where the torch in use has it, else RuntimeError, with
# "Timeout" in the sentence as torch's tests expect), and still a
# muster.Error with .code and .name ("timeout").
_timeout_bases = (muster.Error,)
if hasattr(dist, "DistStoreError"):
    _timeout_bases = (dist.DistStoreError, muster.Error)
StoreTimeout = type("StoreTimeout", _timeout_bases, {"__module__": "muster"})


class _torch_errors:
    """Re-raises musterd's timeout as StoreTimeout."""

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if kind is not None and issubclass(kind, muster.Error) and \
                not isinstance(e, StoreTimeout) and getattr(e, "name", "") == "timeout":
            t = StoreTimeout(f"Timeout: {e} (store timeout)")
            t.code, t.name = e.code, e.name
            raise t from e
        return False


class MusterStore(dist.Store):
    """torch.distributed.Store over the job's key/value store in musterd:
    torch's own bootstrap (gloo and NCCL rendezvous, the store-based
    barrier) goes through the daemon, so no MASTER_ADDR/MASTER_PORT.
    Its keys live under its prefix in the job's store; num_keys() counts
    those. Stores with the same prefix share their keys, on every rank, as
    clients of one TCPStore do; prefix None is this generation's default
    space, "torch/<generation>/store/" (init_torch's own is apart)."""

    def __init__(self, client=None, prefix=None, timeout=None):
        super().__init__()
        self._c = client if client is not None else muster.client()
        if prefix is None:
            prefix = f"torch/{self._c.rank_info.generation}/store/"
        self._prefix = prefix
        if timeout is not None:
            self.set_timeout(timeout if isinstance(timeout, datetime.timedelta)
                             else datetime.timedelta(seconds=timeout))

    def _k(self, key):
        return self._prefix + key

    def set(self, key, value):
        self._c.set(self._k(key), _bytes(value))

    def get(self, key):
        with _torch_errors():
            return self._c.get(self._k(key), _ms(self.timeout))

    def add(self, key, amount):
        return self._c.add(self._k(key), int(amount))

    def compare_set(self, key, expected_value, desired_value):
        return self._c.compare_set(self._k(key), _bytes(expected_value), _bytes(desired_value))

    def delete_key(self, key):
        return self._c.remove(self._k(key))

    def wait(self, keys, timeout=None):
        with _torch_errors():
            self._c.wait([self._k(k) for k in keys],
                         _ms(timeout if timeout is not None else self.timeout))

    def check(self, keys):
        return all(self._c.try_get(self._k(k)) is not None for k in keys)

    def num_keys(self):
        return self._c.num_keys(self._prefix)

    # torch 1.13's Store trampoline looks overrides up under the C++ names:
    # a PrefixStore over this store calls these.
    getNumKeys = num_keys
    deleteKey = delete_key

    # torch's newer Store API: each kept below only when the torch in use
    # declares it on dist.Store (torch 1.13 declares none of them).
    def has_extended_api(self):
        return True

    def append(self, key, value):
        self._c.append(self._k(key), _bytes(value))

    def multi_get(self, keys):
        with _torch_errors():
            return self._c.multi_get([self._k(k) for k in keys], _ms(self.timeout))

    def multi_set(self, keys, values):
        self._c.multi_set([self._k(k) for k in keys], [_bytes(v) for v in values])

    def queue_push(self, key, value):
        self._c.queue_push(self._k(key), _bytes(value))

    def queue_pop(self, key, block=True):
        if block:
            with _torch_errors():
                return self._c.queue_pop(self._k(key), _ms(self.timeout))
        try:
            return self._c.queue_pop(self._k(key), 0.0)
        except muster.Error as e:
            if e.name != "not_found":
                raise
            raise getattr(dist, "QueueEmptyError", muster.Error)(f"queue '{key}' is empty") from e

    def queue_len(self, key):
        return self._c.queue_len(self._k(key))

    def list_keys(self):
        return [k[len(self._prefix):] for k in self._c.list_keys(self._prefix)]

    def clone(self):
        """A MusterStore over the same keys with its own connection (for
        another thread: its waits do not queue behind this one's)."""
        return MusterStore(self._c.clone(), self._prefix, self.timeout)


# name -> function, kept for tests on a torch that lacks them.
_NEWER_API = {}
for _name in ("has_extended_api", "append", "multi_get", "multi_set", "queue_push", "queue_pop",
              "queue_len", "list_keys", "clone"):
    _NEWER_API[_name] = getattr(MusterStore, _name)
    if not hasattr(dist.Store, _name):
        delattr(MusterStore, _name)


def _uuid_text(u):
    """A UUID as nvidia-smi writes it, lower case, without "GPU-": torch
    gives a _CudaDeviceProperties.uuid (str() is the bare UUID) or bytes."""
    if isinstance(u, (bytes, bytearray)):
        h = bytes(u).hex()
        u = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
    text = str(u).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def check_device(device, uuid, rank=None):
    """Raises RuntimeError unless CUDA device ``device`` is the GPU ``uuid``
    (the one muster leased, "GPU-..."): a CUDA_VISIBLE_DEVICES or
    CUDA_DEVICE_ORDER other than the rank joined under renumbers devices.
    Does nothing where this torch cannot name a device's UUID (older than
    2.1)."""
    props = torch.cuda.get_device_properties(device)
    opened = getattr(props, "uuid", None)
    if opened is None:
        return
    if _uuid_text(opened) != _uuid_text(uuid):
        who = "" if rank is None else f"rank {rank}: "
        raise RuntimeError(
            f"{who}CUDA device {device} is GPU-{_uuid_text(opened)}, not the leased GPU {uuid} "
            "(start ranks with muster run, or set CUDA_DEVICE_ORDER=PCI_BUS_ID and keep the "
            "CUDA_VISIBLE_DEVICES the rank joined under)")


def init_torch(backend=None, timeout=datetime.timedelta(minutes=30)):
    """Initialises torch.distributed's default process group for this rank.

    backend None picks "nccl" when CUDA is available and the daemon leased
    this rank a GPU (which becomes the current CUDA device), else "gloo".
    With a GPU lease, the CUDA device must be the leased GPU (its UUID is
    checked) and torch must be able to open it: RuntimeError otherwise,
    never a silent fall back to gloo (backend="gloo" asks for the CPU).
    Under ``muster run`` the rendezvous goes through musterd's store (no
    MASTER_PORT needed); elsewhere (torchrun) it falls back to env://.
    Returns the backend used."""
    if dist.is_initialized():
        return dist.get_backend()
    uuid = ""
    if muster.under_muster():
        c = muster.client()
        info = c.rank_info
        rank, world, device = info.rank, info.world_size, info.device
        uuid = info.device_uuid
    else:
        c = None
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        device = int(os.environ.get("LOCAL_RANK", "-1"))
    cuda = device >= 0 and torch.cuda.is_available() and device < torch.cuda.device_count()
    # A real GPU lease (a UUID) must open that GPU: never a silent gloo on
    # the CPU, never another GPU (check_device). Only backend="gloo" asks
    # for the CPU on purpose.
    if uuid and device >= 0 and backend != "gloo":
        if not cuda:
            raise RuntimeError(
                f"rank {rank} holds a lease of GPU {uuid} (CUDA device {device}), but torch "
                f"cannot open it (torch.cuda.is_available()={torch.cuda.is_available()}, "
                f"device_count()={torch.cuda.device_count() if torch.cuda.is_available() else 0}"
                "): install a CUDA build of torch, or pass backend=\"gloo\" to train on the "
                "CPU, or start the job with muster run --cpu")
        check_device(device, uuid, rank)
    if backend is None:
        backend = "nccl" if cuda and dist.is_nccl_available() else "gloo"
    if cuda:
        torch.cuda.set_device(device)
    if c is None:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                                timeout=timeout)
    else:
        prefix = f"torch/{info.generation}/init_torch/{next(_init_count)}/"
        dist.init_process_group(backend, store=MusterStore(c, prefix, timeout), rank=rank,
                                world_size=world, timeout=timeout)
    return backend


def _world_size():
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    if muster.under_muster():
        return muster.client().rank_info.world_size
    return 1


_KIND = {torch.float32: "float32", torch.float64: "float64"}
_GLOO_AVG = (torch.float32, torch.float64, torch.float16)


def _reduce_via_torch():
    """Whether CPU averages go through torch.distributed: when gloo is up,
    unless MUSTER_SYNC_REDUCE=muster (or =torch to insist)."""
    how = os.environ.get("MUSTER_SYNC_REDUCE", "auto")
    if how not in ("auto", "muster", "torch"):
        raise ValueError(f"MUSTER_SYNC_REDUCE must be auto, muster or torch, not '{how}'")
    up = dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo"
    if how == "torch" and not up:
        raise RuntimeError("MUSTER_SYNC_REDUCE=torch needs torch.distributed with gloo: "
                           "call muster.init_torch() first")
    return up and how != "muster"


def _sync_cpu_muster(items, reduce_parameters, reduce_buffers):
    """items: (tensor, is_parameter). One libmuster sync_model collective
    (shared memory on the node)."""
    staged, bufs, keep = [], [], []
    for t, is_param in items:
        d = t.detach()
        avg = d.is_floating_point() and (reduce_parameters if is_param else reduce_buffers)
        s = d
        if avg and d.dtype not in _KIND:
            s = d.to(torch.float32)  # float16/bfloat16: averaged in float32
        elif not d.is_contiguous():
            s = d.contiguous()
        if s is not d:
            staged.append((d, s))
        keep.append(s)
        bufs.append((s.data_ptr(), s.numel() * s.element_size(), _KIND.get(s.dtype, "bytes"),
                     bool(is_param)))
    muster.client()._sync_model_ptrs(bufs, reduce_parameters, reduce_buffers)
    for d, s in staged:
        d.copy_(s)


def _sync_torch(items, reduce_parameters, reduce_buffers, world):
    """Through torch.distributed (device tensors; any backend)."""
    for t, is_param in items:
        d = t.detach()
        avg = d.is_floating_point() and (reduce_parameters if is_param else reduce_buffers)
        s = d if d.is_contiguous() else d.contiguous()
        if avg:
            dist.all_reduce(s)
            s.div_(world)
        else:
            dist.broadcast(s, 0)
        if s is not d:
            d.copy_(s)


def sync_model(model, reduce_parameters=False, reduce_buffers=False):
    """Makes every rank hold the master's (rank 0's) parameters and buffers.

    With reduce_parameters (reduce_buffers) the floating-point parameters
    (buffers) are averaged across ranks instead; other tensors (integer
    buffers such as BatchNorm's num_batches_tracked) always come from rank 0.
    CPU tensors are copied through musterd's shared-memory sync_model (faster
    than gloo's broadcast, see doc/benchmarks.md) and averaged through gloo's all_reduce
    when torch.distributed is up with gloo (faster than musterd's averaging;
    MUSTER_SYNC_REDUCE=muster|torch overrides); device tensors go through
    torch.distributed, which must be initialised (init_torch). Averages are
    identical on every rank either way. A collective: every rank calls it with
    the same model structure."""
    world = _world_size()
    if world == 1:
        return
    items = [(p, True) for p in model.parameters()] + [(b, False) for b in model.buffers()]
    cpu = [it for it in items if it[0].device.type == "cpu"]
    dev = [it for it in items if it[0].device.type != "cpu"]
    if cpu:
        if not muster.under_muster():
            _sync_torch(cpu, reduce_parameters, reduce_buffers, world)
        else:
            # Measured (doc/benchmarks.md, sync_model): copies from rank 0 are faster through
            # musterd's shared memory than gloo's broadcast; averages are faster
            # through gloo's all_reduce, so those go there when gloo is up.
            avg = [it for it in cpu if it[0].dtype in _GLOO_AVG
                   and (reduce_parameters if it[1] else reduce_buffers)]
            if avg and _reduce_via_torch():
                ids = {id(t) for t, _ in avg}
                _sync_cpu_muster([it for it in cpu if id(it[0]) not in ids], False, False)
                _sync_torch(avg, reduce_parameters, reduce_buffers, world)
            else:
                _sync_cpu_muster(cpu, reduce_parameters, reduce_buffers)
    if dev:
        if not dist.is_initialized():
            raise RuntimeError("sync_model of device tensors needs torch.distributed: call "
                               "muster.init_torch() first")
        _sync_torch(dev, reduce_parameters, reduce_buffers, world)


def _broadcast_tensor(t, root=0):
    """muster.broadcast for a tensor: in place, rank root's values."""
    d = t.detach()
    if d.device.type != "cpu":
        dist.broadcast(d, root)
        return
    s = d if d.is_contiguous() else d.contiguous()
    muster.client()._broadcast_ptr(s.data_ptr(), s.numel() * s.element_size(), root)
    if s is not d:
        d.copy_(s)
