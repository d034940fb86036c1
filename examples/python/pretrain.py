"""Distributed pretraining on synthetic data, the seed's recipe with muster:

    muster run -n 4 --use-env /usr/bin/python3 examples/python/pretrain.py --checkpoint /tmp/ck.pt

(or under `muster launch`: the script also accepts torch.distributed.launch's
--local_rank). init_torch picks NCCL on leased GPUs, else gloo, and
bootstraps torch.distributed through musterd; sync_model makes every rank
start from the master's weights; DistributedSampler shards the data;
gradients are all-reduced by hand (no DistributedDataParallel); only local
masters log and only the master writes the checkpoint.
"""
import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from muster import DistributedSampler, init_torch, is_local_master, is_master, sync_model


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--local_rank", "--local-rank", type=int, default=None,
                   help="set by launchers in torch.distributed.launch style; muster knows it")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--checkpoint", required=True, help="where the master writes the model")
    args = p.parse_args()

    backend = init_torch()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else \
        torch.device("cpu")

    # Synthetic, learnable data, the same on every rank.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.samples, 20, generator=g)
    w = torch.randn(20, generator=g)
    y = (x @ w > 0).long()
    dataset = TensorDataset(x, y)

    # Every rank initialises differently on purpose: sync_model makes them equal.
    torch.manual_seed(1000 + rank)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2)).to(device)
    sync_model(model, reduce_parameters=False, reduce_buffers=False)

    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    if is_local_master():
        print(f"[rank {rank}] {world} ranks, backend {backend}, {len(sampler)} samples per rank",
              flush=True)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        start = time.perf_counter()
        stats = torch.zeros(3, device=device)  # loss sum, correct, count
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad()
            out = model(xb)
            loss = loss_fn(out, yb)
            loss.backward()
            for prm in model.parameters():  # gradient all-reduce, by hand
                dist.all_reduce(prm.grad)
                prm.grad.div_(world)
            opt.step()
            stats += torch.stack([loss.detach() * len(yb), (out.argmax(1) == yb).sum(),
                                  torch.tensor(len(yb), device=device)]).float()
        dist.all_reduce(stats)
        if is_local_master():
            print(f"[rank {rank}] epoch {epoch}: loss {stats[0] / stats[2]:.4f} "
                  f"accuracy {stats[1] / stats[2]:.3f} ({time.perf_counter() - start:.2f} s)",
                  flush=True)

    if is_master():
        # "xb": creating the file twice would fail, so a second writer could not go unnoticed.
        with open(args.checkpoint, "xb") as f:
            torch.save({"model": model.state_dict(), "epochs": args.epochs, "world_size": world},
                       f)
        print(f"[rank {rank}] checkpoint written to {args.checkpoint}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
