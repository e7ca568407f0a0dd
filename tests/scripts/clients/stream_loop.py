"""Training over a stream: a DataLoader over an IterableDataset with no length (as webdataset or a streaming
dataset gives), the loop leaving at a step count no flag trainwise knows names. `--counter index`: `for i, (x, y) in
enumerate(loader)` leaving at `i >= args.updates - 1`, inside `for epoch in range(args.rounds)` (each round an epoch
of --updates steps); `--counter global`: `global_step += 1` and `if global_step >= args.updates: break`, one pass;
`--counter limit`: a sized DataLoader (a third more batches than --updates) whose passes the index cuts at --updates
(a --limit-batches); `--counter none`: a finite stream of --samples samples read to its end each epoch (`for x, y in
loader`, --rounds epochs), each epoch followed by a no_grad pass over a finite validation stream of a tenth as many."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--counter", choices=["index", "global", "limit", "none"], default="index")
parser.add_argument("--updates", type=int, default=100_000)
parser.add_argument("--rounds", type=int, default=2)
parser.add_argument("--samples", type=int, default=None, help="a finite stream's length (--counter none)")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)


class Stream(torch.utils.data.IterableDataset):
    def __init__(self, samples=None):
        self.samples = samples

    def __iter__(self):
        generator = torch.Generator().manual_seed(0)
        drawn = 0
        while self.samples is None or drawn < self.samples:
            x = torch.randn(32, generator=generator)
            drawn += 1
            yield x, x[:1]


loader = torch.utils.data.DataLoader(Stream(args.samples), batch_size=16)
if args.counter == "limit":
    x = torch.randn(16 * (args.updates + args.updates // 3), 32)  # a third more batches than a pass takes
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x[:, :1]), batch_size=16)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)


def train_step(x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


if args.counter in ("index", "limit"):
    for epoch in range(args.rounds):
        for i, (x, y) in enumerate(loader):
            train_step(x, y)
            if i >= args.updates - 1:
                break
elif args.counter == "none":
    validation = torch.utils.data.DataLoader(Stream(args.samples // 10), batch_size=32)
    for epoch in range(args.rounds):
        for x, y in loader:
            train_step(x, y)
        with torch.no_grad():
            loss = sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in validation)
else:
    global_step = 0
    for x, y in loader:
        train_step(x, y)
        global_step += 1
        if global_step >= args.updates:
            break
print("done", flush=True)
