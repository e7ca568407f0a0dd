"""A Trainer class as lucidrains' denoising-diffusion-pytorch writes it: `while self.step < self.train_num_steps:` (a
count kept on the object, resumable), --accumulate batches a step drawn with `next()` from an endless `cycle()` over a
DataLoader, `self.step += 1` after the optimizer step, and every --sample-every steps a sample from the model under
inference_mode (no DataLoader). `--train-num-steps` is a name trainwise reads no step count from: the loop says it."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--train-num-steps", type=int, default=20_000)
parser.add_argument("--accumulate", type=int, default=2)
parser.add_argument("--sample-every", type=int, default=1_000)
parser.add_argument("--samples", type=int, default=200_000)  # 400: the cycle starts the loader's pass every 12.5 steps


def cycle(loader):
    while True:
        for data in loader:
            yield data


class Trainer:
    def __init__(self, train_num_steps: int, accumulate: int, sample_every: int, samples: int) -> None:
        x = torch.randn(samples, 64)
        self.dl = cycle(DataLoader(TensorDataset(x, x[:, :1]), batch_size=16, shuffle=True, drop_last=True))
        self.model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.step, self.train_num_steps = 0, train_num_steps
        self.gradient_accumulate_every, self.save_and_sample_every = accumulate, sample_every

    def sample(self) -> torch.Tensor:
        self.model.eval()
        with torch.inference_mode():
            z = torch.randn(256, 64)
            for _ in range(10):
                z = z + 0.01 * self.model(z)
        return z

    def train(self) -> None:
        while self.step < self.train_num_steps:
            self.model.train()
            for _ in range(self.gradient_accumulate_every):
                xb, yb = next(self.dl)
                loss = torch.nn.functional.mse_loss(self.model(xb), yb) / self.gradient_accumulate_every
                loss.backward()
            self.opt.step()
            self.opt.zero_grad()
            self.step += 1
            if self.step % self.save_and_sample_every == 0:
                self.sample()
        print(f"training complete: loss {loss.item():.4f}")


if __name__ == "__main__":
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    Trainer(args.train_num_steps, args.accumulate, args.sample_every, args.samples).train()
