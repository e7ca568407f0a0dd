"""A training script that uses its training loop's last batch after the loop (it prints the loss per
epoch): the pattern a resume must not break. `--loop next` takes the batches with next() on the
DataLoader's iterator instead of a for loop; writes the final weights to --out."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--sleep", type=float, default=0.0, help="seconds per step (to give a SIGTERM time to land)")
parser.add_argument("--loop", choices=("for", "next"), default="for")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(640, 32)
y = (x[:, 0] > 0).long()
train = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(64, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def step(xb, yb):
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if args.sleep:
        time.sleep(args.sleep)
    return loss


for epoch in range(args.epochs):
    model.train()
    if args.loop == "for":
        for xb, yb in train:
            loss = step(xb, yb)
    else:
        batches = iter(train)
        for _ in range(len(train)):
            xb, yb = next(batches)
            loss = step(xb, yb)
    print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
torch.save(model.state_dict(), args.out)
