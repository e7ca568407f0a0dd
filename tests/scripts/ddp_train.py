"""Small deterministic DDP training job (run under torchrun, gloo, CPU) for checkpoint/resume tests.

Each rank seeds its RNGs with seed + rank (so ranks draw different dropout masks and noise, as a real
job's would), shuffles with a DistributedSampler (set_epoch each epoch), uses dropout (the torch RNG)
and NumPy / Python RNG noise in the data path; optional gradient accumulation with model.no_sync()
and a small bucket_cap_mb (gradients over several buckets). Rank 0 writes the final weights to --out.
"""
import argparse
import os
import random
import signal
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--samples", type=int, default=512)
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--accumulate", type=int, default=1, help="optimizer step every N batches (no_sync in between)")
p.add_argument("--bucket-cap-mb", type=float, default=25.0)
p.add_argument("--layers", type=int, default=1, help="hidden layers (more: gradients over more buckets)")
p.add_argument("--width", type=int, default=32)
p.add_argument("--same-seed", action="store_true", help="seed every rank alike (default: seed + rank)")
p.add_argument("--sleep", type=float, default=0.0, help="seconds per batch (to give a signal time to land)")
p.add_argument("--trace", default="", help="each rank appends a line per batch (epoch, batch, its random draws, the weights' sum) "
               "to <this>-rank<R>.txt")
p.add_argument("--rank1-sigterm-at", type=int, default=0,
               help="rank 1 alone gets a SIGTERM after this many batches (a preemption notice to one node)")
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
seed = 0 if args.same_seed else rank
torch.manual_seed(seed)
np.random.seed(seed)
random.seed(seed)
torch.set_num_threads(1)

g = torch.Generator().manual_seed(1)
x = torch.randn(args.samples, 16, generator=g)
y = (x.sum(1) > 0).long()
sampler = DistributedSampler(TensorDataset(x, y), shuffle=True, seed=5)
train = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, sampler=sampler)

layers: list[nn.Module] = [nn.Linear(16, args.width), nn.ReLU(), nn.Dropout(0.3)]
for _ in range(args.layers - 1):
    layers += [nn.Linear(args.width, args.width), nn.ReLU(), nn.Dropout(0.3)]
layers.append(nn.Linear(args.width, 2))
model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers), bucket_cap_mb=args.bucket_cap_mb)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

trace = open(f"{args.trace}-rank{rank}.txt", "a", buffering=1) if args.trace else None
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    model.train()
    for step, (xb, yb) in enumerate(train):
        noise, scale = torch.from_numpy(np.random.randn(*xb.shape).astype("float32")), random.random()
        xb = xb + 0.01 * noise * scale
        last = (step + 1) % args.accumulate == 0
        if last:
            loss_fn(model(xb), yb).div(args.accumulate).backward()
            opt.step()
            opt.zero_grad()
        else:
            with model.no_sync():
                loss_fn(model(xb), yb).div(args.accumulate).backward()
        if trace is not None:
            weights = sum(float(v.double().sum()) for v in model.parameters())
            # the batch by its samples' sum: a resumed run's enumerate counts from 0 again
            batch = float((xb - 0.01 * noise * scale).double().sum())
            trace.write(f"{epoch} {batch!r} {scale!r} {float(noise.double().sum())!r} {weights!r}\n")
        if rank == 1 and args.rank1_sigterm_at and epoch * len(train) + step + 1 == args.rank1_sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)
        if args.sleep:
            time.sleep(args.sleep)
if rank == 0:
    torch.save({k: v.detach().clone() for k, v in model.module.state_dict().items()}, args.out)
    print(f"rank 0 wrote {args.out} world {dist.get_world_size()} pid {os.getpid()}", flush=True)
dist.destroy_process_group()
