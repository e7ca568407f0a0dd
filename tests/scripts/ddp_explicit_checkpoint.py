"""A small deterministic DDP custom loop (torchrun, gloo, CPU; no DataLoader) that checkpoints through
trainwise's explicit API: twc.restore at the start, twc.maybe_save after each step. Each rank seeds
seed + rank (its own dropout masks and input noise) and trains on its own shard; rank 0 writes the final
weights to --out."""
import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch import nn

from trainwise.run import checkpoint as twc

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--steps", type=int, default=40)
p.add_argument("--directory", default=None, help="twc's directory= (outside trainwise run)")
p.add_argument("--rank1-sigterm-at", type=int, default=0,
               help="rank 1 alone gets a SIGTERM after this step (a preemption notice to one node)")
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(rank)

g = torch.Generator().manual_seed(1)
x = torch.randn(256, 16, generator=g)
y = (x.sum(1) > 0).long()
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2)))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
state = twc.restore(model=model, optimizer=opt, directory=args.directory)
for step in range(state["step"] if state else 0, args.steps):
    start = (step * 16 + rank * 128) % 256
    xb, yb = x[start:start + 16], y[start:start + 16]
    xb = xb + 0.01 * torch.randn_like(xb)
    nn.functional.cross_entropy(model(xb), yb).backward()
    opt.step()
    opt.zero_grad()
    if rank == 1 and step + 1 == args.rank1_sigterm_at:
        os.kill(os.getpid(), signal.SIGTERM)
    twc.maybe_save(step + 1, model=model, optimizer=opt, directory=args.directory)
if rank == 0:
    torch.save({k: v.detach().clone() for k, v in model.module.state_dict().items()}, args.out)
dist.destroy_process_group()
