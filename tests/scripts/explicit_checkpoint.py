"""A custom loop with no DataLoader (tensors indexed by hand) that checkpoints through trainwise's
explicit API: twc.restore at the start, twc.maybe_save after each step."""
import argparse
import time

import torch

from trainwise.run import checkpoint as twc

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--out", required=True)
args = parser.parse_args()

torch.manual_seed(0)
data = torch.randn(256, 8)
target = data.sum(1, keepdim=True)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
state = twc.restore(model=model, optimizer=optimizer)
for step in range(state["step"] if state else 0, args.steps):
    rows = slice((step * 16) % 256, (step * 16) % 256 + 16)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(data[rows]), target[rows]).backward()
    optimizer.step()
    time.sleep(args.sleep)
    twc.maybe_save(step + 1, model=model, optimizer=optimizer)
torch.save(model.state_dict(), args.out)
