"""A training loop with no length in its header, no DataLoader: `for step in count(1)` that leaves at
`--updates` (`--until steps`, a log line every `--log-every` steps; `--max-steps` is the length of its learning-rate
schedule only), or a REINFORCE-style loop over episodes that
leaves when its running reward passes `--threshold` (`--until reward`; this reward never gets there, so the loop ends
at `--seconds` instead, a cap the profile must not wait for)."""
import argparse
import time
from itertools import count

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--until", choices=["steps", "reward"], default="steps")
parser.add_argument("--updates", type=int, default=200_000)
parser.add_argument("--max-steps", type=int, default=None, help="the learning-rate schedule's length (default: --updates)")
parser.add_argument("--log-every", type=int, default=50_000)
parser.add_argument("--threshold", type=float, default=195.0)
parser.add_argument("--seconds", type=float, default=300.0)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.max_steps or args.updates)
data = torch.randn(1024, 32)
start = time.monotonic()


def train_step(step):
    """One optimizer step (a helper the loop calls: the loop is read from the caller's frame)."""
    batch = data[(step * 16) % 1024:(step * 16) % 1024 + 16]
    loss = model(batch).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


if args.until == "steps":
    for step in count(1):
        loss = train_step(step)
        schedule.step()
        if step % args.log_every == 0:
            print(f"step {step} loss {loss:.4f}", flush=True)
        if step >= args.updates:
            break
else:
    running_reward = 10.0
    for episode in count(1):
        running_reward = 0.05 * -train_step(episode) + 0.95 * running_reward
        if running_reward > args.threshold or time.monotonic() - start > args.seconds:
            break
print("done", flush=True)
