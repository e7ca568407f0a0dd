"""Two training DataLoaders drawn in lockstep, as domain adaptation and semi-supervised scripts do: `for (xs, ys),
(xt,) in zip(source_loader, target_loader)`, a labelled source batch and an unlabelled target batch each step (the
target set --ratio times the source's, so the source's pass ends each epoch), a worker each, then a no_grad pass over a
validation loader after every epoch."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=20_000)
parser.add_argument("--ratio", type=float, default=1.5)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
source = TensorDataset(torch.randn(args.samples, 64), torch.randint(0, 4, (args.samples,)))
target = TensorDataset(torch.randn(int(args.samples * args.ratio), 64))
validation = TensorDataset(torch.randn(args.samples // 5, 64), torch.randint(0, 4, (args.samples // 5,)))
source_loader = DataLoader(source, batch_size=32, shuffle=True, num_workers=1)
target_loader = DataLoader(target, batch_size=32, shuffle=True, num_workers=1)
val_loader = DataLoader(validation, batch_size=128)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

for epoch in range(args.epochs):
    model.train()
    for (xs, ys), (xt,) in zip(source_loader, target_loader):
        # cross-entropy on the labelled batch, and an entropy term on the unlabelled one
        probabilities = model(xt).softmax(1)
        loss = (torch.nn.functional.cross_entropy(model(xs), ys)
                - 0.1 * (probabilities * probabilities.clamp_min(1e-8).log()).sum(1).mean())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
    print(f"epoch {epoch}: accuracy {correct / len(validation):.3f}", flush=True)
