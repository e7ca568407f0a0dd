"""Optimizer steps of several model calls, no DataLoader: `--mode accumulate` runs N micro-batches with a backward
each before one step (nanoGPT's gradient_accumulation_steps), `--mode rollout` calls a policy once per action for
N actions and backpropagates the episode once (the PyTorch examples' REINFORCE), with a no_grad evaluation call
after each step (not a training pass)."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["accumulate", "rollout"], default="accumulate")
parser.add_argument("--calls", type=int, default=4, help="model calls per optimizer step")
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = torch.randn(args.calls * args.batch * 16, 32)

for step in range(args.steps):
    optimizer.zero_grad()
    if args.mode == "accumulate":
        for micro in range(args.calls):
            start = ((step * args.calls + micro) % 16) * args.batch
            loss = model(data[start:start + args.batch]).pow(2).mean() / args.calls
            loss.backward()
    else:
        log_probs = []
        for action in range(args.calls):
            state = data[(step + action) % data.shape[0]]  # one state of shape (32,): a batch of one
            log_probs.append(torch.log_softmax(model(state), -1)[action % 4])
        (-torch.stack(log_probs).sum()).backward()
    optimizer.step()
    with torch.no_grad():
        model(data[:args.batch])
print("done", flush=True)
