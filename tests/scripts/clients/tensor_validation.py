"""Training over a DataLoader, validation over tensors without one (model.eval() + no_grad over
slices), the epoch count in --num-epochs."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--num-epochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=1280)
parser.add_argument("--hidden", type=int, default=256)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(args.samples, 64)
y = (x[:, 0] > 0).long()
val_x, val_y = torch.randn(512, 64), torch.randint(2, (512,))
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(args.num_epochs):
    model.train()
    for xb, yb in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(val_x), 64):
            correct += (model(val_x[i:i + 64]).argmax(1) == val_y[i:i + 64]).sum().item()
    print(f"epoch {epoch} accuracy {correct / len(val_x):.3f}", flush=True)
