"""The loop of lucidrains' training scripts (x-transformers' train_enwik8.py and its many kin): batches drawn with
`next()` from endless `cycle()`s over DataLoaders, inside `for i in tqdm.tqdm(range(NUM_BATCHES))` (the run's length
is the range's; the loaders' passes are not its epochs), --accumulate batches per optimizer step, and one validation
batch every --validate-every steps, drawn from its own cycled loader under no_grad. `--train-samples` small makes the
training loader end its pass (and the cycle start another) every few steps."""
import argparse

import torch
import tqdm
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--batches", type=int, default=2000)  # a name trainwise reads no step count from: the range says it
parser.add_argument("--accumulate", type=int, default=2)
parser.add_argument("--validate-every", type=int, default=10)
parser.add_argument("--train-samples", type=int, default=1_000_000)
parser.add_argument("--val-batch", type=int, default=512)
args = parser.parse_args()


def cycle(loader):
    while True:
        for data in loader:
            yield data


torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(args.train_samples, 64)
xv = torch.randn(4096, 64)
train_loader = cycle(DataLoader(TensorDataset(x, x[:, :1]), batch_size=16, shuffle=True, drop_last=True))
val_loader = cycle(DataLoader(TensorDataset(xv, xv[:, :1]), batch_size=args.val_batch, drop_last=True))
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
optim = torch.optim.Adam(model.parameters(), lr=1e-4)

for i in tqdm.tqdm(range(args.batches), mininterval=10.0, desc="training"):
    model.train()
    for _ in range(args.accumulate):
        xb, yb = next(train_loader)
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        (loss / args.accumulate).backward()
    optim.step()
    optim.zero_grad()
    if i % args.validate_every == 0:
        model.eval()
        with torch.no_grad():
            xb, yb = next(val_loader)
            for _ in range(20):  # a dear evaluation of one batch (x-transformers' is a 1,024-token forward)
                val_loss = torch.nn.functional.mse_loss(model(xb), yb)
print(f"done: loss {loss.item():.4f} val {val_loss.item():.4f}")
