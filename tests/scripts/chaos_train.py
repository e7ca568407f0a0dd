"""Small deterministic training job for checkpoint/resume tests: dropout (uses the torch RNG), a
shuffled DataLoader with its own generator, SGD with momentum, a per-iteration and a per-epoch LR
scheduler, NumPy and Python RNG use in the data path; writes the final weights to --out."""
import argparse
import random
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--samples", type=int, default=512)
p.add_argument("--batch-size", type=int, default=16)
p.add_argument("--sleep", type=float, default=0.0, help="seconds per step (to give a kill time to land)")
p.add_argument("--workers", type=int, default=0)
p.add_argument("--width", type=int, default=64)
p.add_argument("--train-inside-step", action="store_true", help="model.train() in each step, not before the epoch")
p.add_argument("--train-eval", action="store_true",
               help="after each epoch, a loss over the training set without eval() or no_grad (dropout on, no step)")
args = p.parse_args()
torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
torch.set_num_threads(1)


class Noisy(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 16, generator=g)
        self.y = (self.x.sum(1) > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


model = nn.Sequential(nn.Linear(16, args.width), nn.ReLU(), nn.Dropout(0.3), nn.Linear(args.width, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
per_step = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + 0.01 * s))
per_epoch = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
train = DataLoader(Noisy(args.samples), batch_size=args.batch_size, shuffle=True,
                   generator=torch.Generator().manual_seed(7), num_workers=args.workers)
val = DataLoader(Noisy(64), batch_size=32)
loss_fn = nn.CrossEntropyLoss()
for epoch in range(args.epochs):
    if not args.train_inside_step:
        model.train()
    for x, y in train:
        if args.train_inside_step:
            model.train()  # this epoch's pass began in eval mode (the last validation's)
        x = x + 0.01 * torch.from_numpy(np.random.randn(*x.shape).astype("float32")) * random.random()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        per_step.step()
        if args.sleep:
            time.sleep(args.sleep)
    if args.train_eval:
        for x, y in train:
            loss_fn(model(x), y)
    model.eval()
    with torch.no_grad():
        for x, y in val:
            loss_fn(model(x), y)
    per_epoch.step()
torch.save(model.state_dict(), args.out)
