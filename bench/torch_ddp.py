#!/usr/bin/python3
"""PyTorch DDP peer of bench/dist_train.sh: data-parallel training speed.

One process per rank, started by the caller (bench/dist_train.sh pins each to
its own core with taskset).  With --world 1 it is the plain single-process loop
(no DDP wrapper, no process group): the baseline the speed-up is measured
against.  With --world N >= 2 the model is wrapped in DistributedDataParallel
over gloo (rendezvous through a file, --rdv), so gradients are all-reduced
inside backward, bucket by bucket, as DDP always does.

Same recipe as bench/torch_peer.py (its read_idx and model_for: the same
LeNet-5 / MLP, default init), Adam lr 1e-3, batch --batch per process, one
thread per process, Fashion-MNIST held in memory as uint8 and converted per
batch.  Every rank draws the same permutation per epoch (same seed) and takes
its shard perm[rank::world], as DistributedSampler does.

--warmup steps run first (not timed); then --steps steps are timed.  Rank 0
prints one JSON object: world, steps, samples_per_s = world x batch x steps /
(slowest rank's time), final loss.
Run with Debian's python3 (/usr/bin/python3), where python3-torch imports.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import model_for, read_idx  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--hidden", default="256")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch", type=int, default=64, help="per process")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--rdv", help="rendezvous file (world >= 2); must not exist yet")
    ap.add_argument("--init", help="init method instead of --rdv (tcp://ADDR:PORT: rank 0 "
                    "listens there; bench/seed_table.sh, across network namespaces)")
    ap.add_argument("--folder", help="a photo folder (<class>/<image>) instead of Fashion-MNIST: "
                    "torchvision's ImageFolder, RandomResizedCrop(--size) + flip + ImageNet "
                    "normalisation, decoded per batch (WORKLOAD=finetune of bench/seed_table.sh)")
    ap.add_argument("--size", type=int, default=64)
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    if a.folder:
        return folder_main(a)
    xtr = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte")).copy())
    ytr = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte")).astype("int64"))
    xtr = xtr.unsqueeze(1)

    model = model_for(a.model, [int(h) for h in a.hidden.split(",") if h])
    if a.world > 1:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=a.init or "file://" + a.rdv,
                                rank=a.rank, world_size=a.world)
        model = nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    lossf = nn.CrossEntropyLoss()

    n = xtr.shape[0]
    per_rank = n // a.world
    steps_per_epoch = per_rank // a.batch
    gen = torch.Generator().manual_seed(a.seed)
    perm, pos = None, steps_per_epoch

    def step():
        nonlocal perm, pos
        if pos == steps_per_epoch:
            perm = torch.randperm(n, generator=gen)[a.rank::a.world]
            pos = 0
        idx = perm[pos * a.batch:(pos + 1) * a.batch]
        pos += 1
        x = xtr[idx].float().div_(255.0)
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), ytr[idx])
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    if a.world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    t = time.perf_counter() - t0
    if a.world > 1:
        tt = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        t = tt.item()
    if a.rank == 0:
        print(json.dumps({"peer": "pytorch " + torch.__version__ + (" ddp gloo" if a.world > 1 else ""),
                          "model": a.model, "world": a.world, "batch_per_rank": a.batch,
                          "steps": a.steps, "train_s": t,
                          "samples_per_s": a.world * a.batch * a.steps / t,
                          "final_loss": float(loss.item())}), flush=True)
    # No teardown: in PyTorch 1.13, destroying the gloo process group while
    # DDP's reducer still holds it deadlocks (~ProcessGroupGloo joins a worker
    # thread that waits for the GIL this thread holds).  Every collective is
    # done here, so leave at once.
    sys.stdout.flush()
    os._exit(0)


def folder_main(a):
    """--folder: torchvision's model (--model, e.g. resnet18) on a photo folder, Adam, batch
    --batch per rank, each rank its shard of a seeded permutation; the same JSON line."""
    import torchvision
    import torchvision.transforms as T

    tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(a.folder, transform=tf)
    model = getattr(torchvision.models, a.model)(num_classes=len(ds.classes))
    if a.world > 1:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=a.init or "file://" + a.rdv,
                                rank=a.rank, world_size=a.world)
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    lossf = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(a.seed)
    order = []

    def step():
        nonlocal order
        if len(order) < a.batch:
            order = torch.randperm(len(ds), generator=gen)[a.rank::a.world].tolist()
        idx, order = order[:a.batch], order[a.batch:]
        items = [ds[i] for i in idx]
        x = torch.stack([t for t, _ in items])
        y = torch.tensor([c for _, c in items])
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    if a.world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    t = time.perf_counter() - t0
    if a.world > 1:
        tt = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        t = tt.item()
    if a.rank == 0:
        print(json.dumps({"peer": "pytorch " + torch.__version__ + (" ddp gloo" if a.world > 1 else ""),
                          "model": a.model, "world": a.world, "batch_per_rank": a.batch,
                          "steps": a.steps, "train_s": t,
                          "samples_per_s": a.world * a.batch * a.steps / t,
                          "final_loss": float(loss.item())}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # see main: no gloo teardown


if __name__ == "__main__":
    main()
