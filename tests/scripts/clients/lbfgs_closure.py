"""LBFGS with a closure, as in the PyTorch examples' time_sequence_prediction: one optimizer step runs
many forward/backward passes; no DataLoader; a no_grad prediction after each step."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--n_epochs", type=int, default=8, help="steps (each one LBFGS step over the whole set)")
parser.add_argument("--samples", type=int, default=64)
parser.add_argument("--hidden", type=int, default=32)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
t = torch.linspace(0, 20, 200)
data = torch.sin(t.unsqueeze(0) + torch.rand(args.samples, 1) * 6)
x, y = data[:, :-1], data[:, 1:]
test_x, test_y = x[:8], y[:8]


class Sequence(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(1, args.hidden, batch_first=True)
        self.linear = torch.nn.Linear(args.hidden, 1)

    def forward(self, inp):
        out, _ = self.lstm(inp.unsqueeze(-1))
        return self.linear(out).squeeze(-1)


seq = Sequence()
criterion = torch.nn.MSELoss()
optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=6)
for step in range(args.n_epochs):
    def closure():
        optimizer.zero_grad()
        loss = criterion(seq(x), y)
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        print(f"step {step} test loss {criterion(seq(test_x), test_y).item():.4f}", flush=True)
