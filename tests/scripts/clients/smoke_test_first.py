"""A script that checks its training step in a subprocess first (a few steps of a smoke test, as some training
scripts do before the real run), then trains --epochs passes itself."""

import argparse
import subprocess
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def train(epochs, batches):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(batches * 32, 64), torch.randint(0, 10, (batches * 32,))), batch_size=32)
    for _ in range(epochs):
        for inputs, targets in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(inputs), targets).backward()
            optimizer.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        train(1, 3)
        sys.exit(0)
    subprocess.run([sys.executable, __file__, "--smoke"], check=True)
    train(args.epochs, args.batches)
