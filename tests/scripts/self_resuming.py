"""A script that keeps its own checkpoint (torch.save at each epoch's end) and resumes from it itself."""
import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--own", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()

torch.manual_seed(0)
data = torch.randn(128, 8)
loader = DataLoader(TensorDataset(data, data.sum(1, keepdim=True)), batch_size=16, shuffle=True)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
first_epoch = 0
if os.path.exists(args.own):
    saved = torch.load(args.own)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    first_epoch = saved["epoch"] + 1
for epoch in range(first_epoch, args.epochs):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        time.sleep(args.sleep)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, args.own)
torch.save(model.state_dict(), args.out)
