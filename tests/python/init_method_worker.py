"""A launcher test program in the shape of torch's
test/distributed/launcher/bin/test_script_init_method.py: torch.distributed
comes up from the --init_method it is given (tcp://localhost:PORT of the
launcher's --master_port, or env://), with RANK and WORLD_SIZE from the
environment, and an all-reduce of one-hot tensors must add up to the world."""
import argparse
import os

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init-method", "--init_method", required=True)
    args = ap.parse_args()
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method=args.init_method, world_size=world, rank=rank)
    t = torch.zeros(world, dtype=torch.int64)
    t[dist.get_rank()] = 1
    dist.all_reduce(t)
    if int(t.sum()) != world:
        raise RuntimeError(f"the all-reduce adds up to {int(t.sum())}, not {world}")
    print(f"rank {rank}: done via {args.init_method}", flush=True)


if __name__ == "__main__":
    main()
