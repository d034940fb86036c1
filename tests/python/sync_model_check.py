"""muster.sync_model under `muster run -n 4 --use-env /usr/bin/python3 THIS`:
after a plain sync every rank holds rank 0's weights; with the reduce flags
they hold the average. Ranks compare checksums through the store."""
import hashlib
import sys

try:
    import numpy
    import torch
except ImportError as e:  # meson counts exit code 77 as skipped
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

import muster
import muster.distributed as md

c = muster.client()
me = c.rank_info
rank, world = me.rank, me.world_size
assert world == 4, world


def make(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 4, bias=False).double())
    bn = m[1]
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-0.5, 0.5)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(1, 2)
    bn.num_batches_tracked.fill_(seed)
    m.register_buffer("noncontig", torch.randn(4, 3).t())  # non-contiguous
    m.register_buffer("fp16", torch.randn(5).half())
    assert not m.noncontig.is_contiguous()
    return m


def digest(m):
    h = hashlib.sha256()
    for k, v in m.state_dict().items():
        h.update(k.encode())
        h.update(v.contiguous().numpy().tobytes())
    return h.hexdigest()


def agree(tag, value):
    """Every rank publishes value; all must be equal. Returns them."""
    c.set(f"test/{tag}/{rank}", value)
    vals = [c.get(f"test/{tag}/{r}").decode() for r in range(world)]
    assert len(set(vals)) == 1, f"{tag}: ranks disagree: {vals}"
    return vals


def average(models, attr):
    out = {}
    for k in dict(attr(models[0])):
        acc = sum(dict(attr(m))[k].double() for m in models)
        out[k] = (acc / len(models)).to(dict(attr(models[0]))[k].dtype)
    return out


seeds = [100 + r for r in range(world)]
ref0 = make(seeds[0])

# 1. Plain sync: rank 0's weights everywhere (and they differed before).
m = make(seeds[rank])
assert (digest(m) == digest(ref0)) == (rank == 0), "models must differ before sync_model"
muster.sync_model(m)
assert digest(m) == digest(ref0), f"rank {rank} does not hold rank 0's weights"
agree("plain", digest(m))

# 2. reduce_parameters: the average of every rank's parameters; buffers from rank 0.
all_models = [make(s) for s in seeds]
m = make(seeds[rank])
muster.sync_model(m, reduce_parameters=True)
avg = average(all_models, lambda x: x.named_parameters())
for k, p in m.named_parameters():
    assert torch.allclose(p.detach(), avg[k], rtol=0, atol=1e-6), f"param {k} is not the average"
    assert not torch.equal(p.detach(), dict(ref0.named_parameters())[k].detach()), k
for k, b in m.named_buffers():
    assert torch.equal(b, dict(ref0.named_buffers())[k]), f"buffer {k} not rank 0's"
assert m[0].weight.requires_grad
agree("reduce_params", digest(m))

# 3. reduce_buffers as well: float buffers averaged (half in float32), ints from rank 0.
m = make(seeds[rank])
muster.sync_model(m, reduce_parameters=True, reduce_buffers=True)
bavg = average(all_models, lambda x: x.named_buffers())
for k, b in m.named_buffers():
    if b.is_floating_point():
        assert torch.allclose(b.float(), bavg[k].float(), rtol=0, atol=1e-3), f"buffer {k}"
    else:
        assert torch.equal(b, dict(ref0.named_buffers())[k]), f"int buffer {k} not rank 0's"
agree("reduce_all", digest(m))

# 4. The torch.distributed path (what device tensors use), over gloo.
muster.init_torch()
m = make(seeds[rank])
md._sync_torch([(p, True) for p in m.parameters()] + [(b, False) for b in m.buffers()],
               False, False, world)
assert digest(m) == digest(ref0)
agree("torch_path", digest(m))
# sync_model with gloo up: averages through gloo, copies through musterd.
m = make(seeds[rank])
muster.sync_model(m, reduce_parameters=True, reduce_buffers=True)
for k, v in m.state_dict().items():
    if v.is_floating_point():
        want = {**avg, **bavg}[k]
        assert torch.allclose(v.float(), want.float(), rtol=0, atol=1e-3), f"gloo avg {k}"
    else:
        assert torch.equal(v, ref0.state_dict()[k]), k
agree("gloo_reduce", digest(m))

# 5. muster.broadcast: numpy array, bytearray, tensor (from rank 2).
a = numpy.full(1000, rank, dtype=numpy.float32)
muster.broadcast(a, root=2)
assert (a == 2).all()
b = bytearray(f"rank{rank}".encode())
muster.broadcast(b)
assert bytes(b) == b"rank0"
t = torch.full((3, 5), float(rank)).t()
muster.broadcast(t, root=2)
assert torch.equal(t, torch.full((5, 3), 2.0))
c.barrier("done")
if rank == 0:
    print(f"sync_model over {world} ranks OK")
