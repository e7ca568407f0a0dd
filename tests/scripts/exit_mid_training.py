"""Writes the arguments and TRAINWISE_TEST_VALUE it got to argv[1], then trains and calls sys.exit(0)
in the middle of its first epoch (`--exit-after N` steps; 0: trains its 2 epochs to the end); with
`--builtin-exit`, the exit() builtin instead."""
import json
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

out, args = sys.argv[1], sys.argv[2:]
with open(out, "w") as handle:
    json.dump({"argv": args, "env": os.environ.get("TRAINWISE_TEST_VALUE")}, handle)
exit_after = int(args[args.index("--exit-after") + 1]) if "--exit-after" in args else 0

torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(320, 8)
train = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
steps = 0
for epoch in range(2):
    for xb, yb in train:
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
        optimizer.zero_grad()
        steps += 1
        if steps == exit_after:
            (exit if "--builtin-exit" in args else sys.exit)(0)
