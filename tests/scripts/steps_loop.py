"""A loop bound by a flag no reader knows as an epoch count or step budget (`--steps`, as the PyTorch examples'
time_sequence_prediction): each pass of `range(args.steps)` is one optimizer step followed by a no_grad
prediction, so the epochs (training between validation regions) are one iteration each and the loop's range
is the whole run."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=15, help="steps to run")
parser.add_argument("--samples", type=int, default=64)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(args.samples, 8)
y = x.sum(1, keepdim=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(args.steps):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    with torch.no_grad():
        torch.nn.functional.mse_loss(model(x[:8]), y[:8])
