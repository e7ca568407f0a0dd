"""A plain PyTorch training script, unmodified: the profiler must see it from outside."""
import argparse
import shutil
import pathlib

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=None, help="default 3")
parser.add_argument("--passes", type=int, default=0, help="epochs under a name trainwise does not read (replaces --epochs)")
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--train-samples", type=int, default=640)
parser.add_argument("--val-samples", type=int, default=320)
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument("--done-file", default="")
parser.add_argument("--train-inside-step", action="store_true", help="call model.train() in each step, not per epoch")
parser.add_argument("--validate-every", type=int, default=0, help="also validate after every N steps inside an epoch")
parser.add_argument("--save-file", default="", help="torch.save the model here after training")
parser.add_argument("--checkpoint-file", default="", help="torch.save a checkpoint here every --checkpoint-every steps, "
                    "and read it back")
parser.add_argument("--checkpoint-every", type=int, default=5)
parser.add_argument("--best-file", default="", help="shutil.copyfile each checkpoint here (pytorch/examples' ImageNet way)")
parser.add_argument("--denormal-file", default="", help="write whether denormal floats are flushed to zero here")
parser.add_argument("--plain-validation", action="store_true",
                    help="validate without model.eval() or torch.no_grad(): just the loss over the validation loader")
parser.add_argument("--train-eval", choices=["none", "plain", "eval"], default="none",
                    help="after each epoch also evaluate the training set: plain (gradients on, train mode) or eval "
                         "(model.eval() and torch.no_grad())")
parser.add_argument("--peek", action="store_true", help="look at one training batch (next(iter(loader))) before training")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(args.train_samples + args.val_samples, 32)
y = (x[:, 0] > 0).long()
train = DataLoader(TensorDataset(x[: args.train_samples], y[: args.train_samples]), batch_size=args.batch_size, shuffle=True)
val = DataLoader(TensorDataset(x[args.train_samples:], y[args.train_samples:]), batch_size=args.batch_size)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def evaluate(loader, plain: bool) -> int:
    if plain:
        loss = 0.0
        for xb, yb in loader:
            loss += torch.nn.functional.cross_entropy(model(xb), yb).item()
        return int(loss)
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in loader:
            correct += (model(xb).argmax(1) == yb).sum().item()
    return correct


def validate() -> int:
    return evaluate(val, args.plain_validation)


if args.peek:
    first_x, first_y = next(iter(train))
    print(f"batch shape {tuple(first_x.shape)}", flush=True)
for epoch in range(args.passes or args.epochs or 3):
    if not args.train_inside_step:
        model.train()
    for step, (xb, yb) in enumerate(train):
        if args.train_inside_step:
            model.train()  # the previous validation left the model in eval mode when this pass began
        loss = torch.nn.functional.cross_entropy(model(xb), yb) / args.accumulate
        loss.backward()
        if (step + 1) % args.accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
        if args.checkpoint_file and (step + 1) % args.checkpoint_every == 0:
            torch.save({"step": step, "model": model.state_dict()}, args.checkpoint_file)
            assert torch.load(args.checkpoint_file)["step"] == step
            if args.best_file:
                shutil.copyfile(args.checkpoint_file, args.best_file)
        if args.validate_every and (step + 1) % args.validate_every == 0 and step + 1 < len(train):
            validate()
            model.train()
    if args.train_eval != "none":
        evaluate(train, args.train_eval == "plain")
        model.train()
    correct = validate()
    print(f"epoch {epoch} accuracy {correct / args.val_samples:.3f}", flush=True)
if args.save_file:
    torch.save(model.state_dict(), args.save_file)
if args.done_file:
    pathlib.Path(args.done_file).write_text("trained")
if args.denormal_file:
    # 1e-40 is a float32 denormal: with denormals flushed (DAZ) it reads as zero.
    flushed = (torch.tensor([1e-40]) * 2.0).item() == 0.0
    pathlib.Path(args.denormal_file).write_text("flushed" if flushed else "kept")
