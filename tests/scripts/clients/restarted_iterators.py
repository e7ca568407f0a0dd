"""The loop of FixMatch-style semi-supervised scripts: epochs of --eval-step steps (`for batch_idx in
range(args.eval_step)` inside the epoch loop), each step drawing a labelled batch and (unless --single) an unlabelled
batch with next() from iterators begun again when they run out (`except StopIteration: it = iter(loader)`), a worker
each, then a no_grad test pass after every epoch. Neither loader's pass is an epoch."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--eval-step", type=int, default=300)
parser.add_argument("--labelled", type=int, default=4000)
parser.add_argument("--unlabelled", type=int, default=40000)
parser.add_argument("--mu", type=int, default=3)
parser.add_argument("--single", action="store_true", help="the labelled loader alone")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
labelled = TensorDataset(torch.randn(args.labelled, 64), torch.randint(0, 4, (args.labelled,)))
unlabelled = TensorDataset(torch.randn(args.unlabelled, 64))
test = TensorDataset(torch.randn(4000, 64), torch.randint(0, 4, (4000,)))
labelled_loader = DataLoader(labelled, batch_size=32, shuffle=True, num_workers=1, drop_last=True)
unlabelled_loader = DataLoader(unlabelled, batch_size=32 * args.mu, shuffle=True, num_workers=1, drop_last=True)
test_loader = DataLoader(test, batch_size=256)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9, nesterov=True)

labelled_iter, unlabelled_iter = iter(labelled_loader), iter(unlabelled_loader)
model.train()
for epoch in range(args.epochs):
    for batch_idx in range(args.eval_step):
        try:
            x_l, y_l = next(labelled_iter)
        except StopIteration:
            labelled_iter = iter(labelled_loader)
            x_l, y_l = next(labelled_iter)
        if args.single:
            x_u = x_l
        else:
            try:
                (x_u,) = next(unlabelled_iter)
            except StopIteration:
                unlabelled_iter = iter(unlabelled_loader)
                (x_u,) = next(unlabelled_iter)
        logits = model(torch.cat([x_l, x_u]))
        pseudo = logits[len(x_l):].detach().softmax(1)
        confident = (pseudo.max(1).values > 0.5).float()
        loss = (torch.nn.functional.cross_entropy(logits[:len(x_l)], y_l)
                + (torch.nn.functional.cross_entropy(logits[len(x_l):], pseudo.argmax(1), reduction="none")
                   * confident).mean())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in test_loader)
    model.train()
    print(f"epoch {epoch}: accuracy {correct / len(test):.3f}", flush=True)
