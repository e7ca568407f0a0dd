"""A DataLoader + SGD loop that counts, with sys.setprofile, the Python calls one training step makes (step 50), and
writes how many were in trainwise's code to the file given: the agent's per-step bookkeeping, counted, not timed."""

import json
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(3200, 64)
y = (x[:, 0] > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
calls: list[str] = []


# trainwise's own code: its package directory (only imported under the agent; a path that merely contains the word,
# such as a virtual environment named after the project, is not it)
trainwise_package = os.path.dirname(sys.modules["trainwise"].__file__) + os.sep if "trainwise" in sys.modules else None


def count(frame, event, arg):
    if event == "call":
        calls.append(frame.f_code.co_filename)


for n, (xb, yb) in enumerate(loader, start=1):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(xb), yb).backward()
    optimizer.step()
    if n == 50:
        sys.setprofile(None)
        break
    if n == 49:
        sys.setprofile(count)  # one whole step: the next batch request, forward, backward, optimizer step
with open(sys.argv[1], "w") as out:
    ours = sum(name.startswith(trainwise_package) for name in calls) if trainwise_package else 0
    json.dump({"python_calls": len(calls), "trainwise_calls": ours}, out)
