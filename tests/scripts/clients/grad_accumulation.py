"""Gradient accumulation: four DataLoader batches per optimizer step, the epoch count in --max-epochs."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--max-epochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=2048)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--accumulate", type=int, default=4)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(args.samples, 64)
y = (x[:, :2].sum(1) > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
val = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=64)
model = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(args.max_epochs):
    model.train()
    for step, (xb, yb) in enumerate(loader):
        (torch.nn.functional.cross_entropy(model(xb), yb) / args.accumulate).backward()
        if (step + 1) % args.accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        correct = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val)
    print(f"epoch {epoch} correct {correct}", flush=True)
