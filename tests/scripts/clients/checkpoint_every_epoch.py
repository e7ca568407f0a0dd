"""A DataLoader + Adam loop that saves a checkpoint at the end of every epoch (the super-resolution
example's `--nEpochs` and per-epoch torch.save), with workers that restart each epoch."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--nEpochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=1280)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--checkpoint", default="model_epoch.pth")
args = parser.parse_args()

if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(args.samples, 64)
    y = x.sum(1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, num_workers=args.workers)
    val = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=64)
    model = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(1, args.nEpochs + 1):
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            loss = sum(torch.nn.functional.mse_loss(model(xb), yb).item() for xb, yb in val)
        torch.save(model.state_dict(), args.checkpoint)
        print(f"epoch {epoch} val {loss:.3f} saved {args.checkpoint}", flush=True)
