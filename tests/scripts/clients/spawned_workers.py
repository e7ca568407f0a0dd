"""Training in processes the script starts, as pytorch/examples' mnist_hogwild does: the parent parses its
arguments and builds a shared model, torch.multiprocessing starts --processes workers (--start-method: spawn, or
fork as mnist_hogwild on Linux), each trains
--epochs passes of its own DataLoader with its own optimizer, the parent joins them and evaluates."""

import argparse

import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset


def train(rank, epochs, batches, model):
    torch.set_num_threads(1)  # one core each: the workers share the host
    torch.manual_seed(rank)
    data = TensorDataset(torch.randn(batches * 32, 64), torch.randint(0, 10, (batches * 32,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    for _ in range(epochs):
        for inputs, targets in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(inputs), targets).backward()
            optimizer.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--start-method", default="spawn", choices=("spawn", "fork"))
    args = parser.parse_args()
    mp.set_start_method(args.start_method, force=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    model.share_memory()
    workers = [mp.Process(target=train, args=(rank, args.epochs, args.batches, model)) for rank in range(args.processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    with torch.no_grad():
        print("loss", torch.nn.functional.cross_entropy(model(torch.randn(256, 64)), torch.randint(0, 10, (256,))).item())
