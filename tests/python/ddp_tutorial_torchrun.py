"""Shaped like pytorch/examples distributed/ddp-tutorial-series/
multigpu_torchrun.py (a Trainer over a DistributedSampler'd DataLoader,
snapshots by local rank 0, LOCAL_RANK/RANK from torchrun's environment), on
CPU with gloo and a tiny synthetic data set:
`muster run -n 4 --cpu THIS TOTAL_EPOCHS SAVE_EVERY --snapshot_path P`.
At the end every rank must hold the same parameters, and the snapshot
must load."""
import argparse
import os
import sys

try:
    import torch
    import torch.nn.functional as F
    from torch.distributed import destroy_process_group, init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data.distributed import DistributedSampler
except ImportError as e:
    print(f"SKIP: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

from ddp_agree import assert_ranks_agree, flat_parameters


class MyTrainDataset(Dataset):
    def __init__(self, size):
        g = torch.Generator().manual_seed(7)
        self.size = size
        self.data = [(torch.rand(20, generator=g), torch.rand(1, generator=g)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


def ddp_setup():
    init_process_group(backend="gloo")


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            print("Loading snapshot")
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model)

    def _load_snapshot(self, snapshot_path):
        snapshot = torch.load(snapshot_path)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.mse_loss(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[CPU{self.global_rank}] Epoch {epoch} | Batchsize: {b_sz} | "
              f"Steps: {len(self.train_data)}")
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.local_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def load_train_objs():
    train_set = MyTrainDataset(256)
    torch.manual_seed(int(os.environ["RANK"]))  # DDP must make the ranks' models one
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    return train_set, model, optimizer


def prepare_dataloader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, pin_memory=torch.cuda.is_available(),
                      shuffle=False, sampler=DistributedSampler(dataset))


def main(save_every, total_epochs, batch_size, snapshot_path):
    ddp_setup()
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path)
    start = flat_parameters(trainer.model)
    trainer.train(total_epochs)
    final = assert_ranks_agree(trainer.model, start)
    torch.distributed.barrier()  # the snapshot is written
    saved = torch.load(snapshot_path)
    assert saved["EPOCHS_RUN"] == total_epochs - 1, saved["EPOCHS_RUN"]
    weights = torch.cat([v.reshape(-1).double() for v in saved["MODEL_STATE"].values()])
    assert torch.allclose(weights, final, rtol=0, atol=1e-9), "the last snapshot is the model"
    torch.distributed.barrier()
    if trainer.global_rank == 0:
        os.unlink(snapshot_path)  # the next run starts afresh
        print(f"ddp tutorial: parameters agree on all {torch.distributed.get_world_size()} ranks")
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument("--batch_size", default=32, type=int,
                        help="Input batch size on each device (default: 32)")
    parser.add_argument("--snapshot_path", default="snapshot.pt")
    args = parser.parse_args()
    main(args.save_every, args.total_epochs, args.batch_size, args.snapshot_path)
