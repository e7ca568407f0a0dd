"""A compiled model: torch.compile(model, fullgraph=True) (or model.compile() with --in-place, or a whole training
step compiled with --whole-step), a DataLoader, and validation over tensors under no_grad after each epoch."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--samples", type=int, default=2048)
parser.add_argument("--backend", default="inductor")
parser.add_argument("--in-place", action="store_true", help="model.compile() instead of torch.compile(model)")
parser.add_argument("--whole-step", action="store_true", help="torch.compile of the training step (model left as is)")
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(args.samples, 32)
y = (x[:, 0] > 0).long()
val_x, val_y = torch.randn(256, 32), torch.randint(2, (256,))
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
if args.in_place:
    model.compile(backend=args.backend, fullgraph=True)
elif not args.whole_step:
    model = torch.compile(model, backend=args.backend, fullgraph=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)


def train_step(xb, yb):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(xb), yb).backward()  # a graph break when compiled whole
    optimizer.step()


step = torch.compile(train_step, backend=args.backend) if args.whole_step else train_step
for epoch in range(args.epochs):
    model.train()
    for xb, yb in loader:
        step(xb, yb)
    model.eval()
    with torch.no_grad():
        correct = sum((model(val_x[i:i + 64]).argmax(1) == val_y[i:i + 64]).sum().item() for i in range(0, 256, 64))
    print(f"epoch {epoch} accuracy {correct / 256:.3f}", flush=True)
