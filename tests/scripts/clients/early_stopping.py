"""A DataLoader loop with early stopping: after each epoch a no_grad validation pass, and the epoch loop leaves once
the validation loss has not improved for --patience epochs (or when it is below --target). The prediction runs every
epoch of --epochs; the run may stop sooner."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=50)
parser.add_argument("--patience", type=int, default=3)
parser.add_argument("--target", type=float, default=0.0)
parser.add_argument("--samples", type=int, default=32_000)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(args.samples, 32)
train = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=32, shuffle=True)
validation = DataLoader(TensorDataset(x[:2000], x[:2000].sum(1, keepdim=True)), batch_size=256)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

best, bad_epochs = float("inf"), 0
for epoch in range(args.epochs):
    model.train()
    for inputs, targets in train:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        validation_loss = sum(torch.nn.functional.mse_loss(model(i), t).item() for i, t in validation)
    if validation_loss < best:
        best, bad_epochs = validation_loss, 0
    else:
        bad_epochs += 1
    if bad_epochs >= args.patience or validation_loss < args.target:
        break
    print(f"epoch {epoch}: validation loss {validation_loss:.4f}", flush=True)
