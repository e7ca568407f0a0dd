"""Small helpers shared by the reference workload scripts.

Plumbing (command-line parsing, seeding, device choice, one-line epoch summary) and the one plain
training loop the classifiers share (``fit``), written with the standard idioms an outside profiler must
see: ``DataLoader.__next__``, ``optimizer.step()``, ``model.eval()`` + ``torch.no_grad()`` for validation.
Nothing here imports any trainwise profiling code.
"""

from __future__ import annotations

import argparse
import os
import random
import zlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from trainwise.optional import require


def build_parser(
    description: str,
    *,
    batch_size: int,
    epochs: int,
    train_samples: int,
    val_samples: int,
    lr: float,
) -> argparse.ArgumentParser:
    """The common CLI of every workload script, with the papers' values as defaults."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batch-size", type=int, default=batch_size,
                   help=f"training and validation batch size (seed default {batch_size})")
    p.add_argument("--epochs", type=int, default=epochs,
                   help=f"number of epochs (seed default {epochs})")
    p.add_argument("--train-samples", type=int, default=train_samples,
                   help=f"training-set size (seed default {train_samples})")
    p.add_argument("--val-samples", type=int, default=val_samples,
                   help=f"validation-set size (seed default {val_samples})")
    p.add_argument("--lr", type=float, default=lr, help=f"learning rate (seed default {lr})")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes (default 0)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads value (default: leave torch's default)")
    p.add_argument("--seed", type=int, default=0, help="seed for data generation, init and shuffling")
    p.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda, cuda:1, ...")
    return p


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    for name in ("batch_size", "epochs", "train_samples", "val_samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.num_workers < 0:
        parser.error("--num-workers must be >= 0")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    if args.lr <= 0:
        parser.error("--lr must be > 0")
    return args


def setup(args: argparse.Namespace) -> torch.device:
    """Apply --threads and --seed, and return the torch device asked for with --device."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed % 2**32)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None and "LOCAL_RANK" in os.environ:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per torchrun worker
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda was asked for but torch.cuda.is_available() is False")
    return device


def loader_kwargs(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Keyword arguments shared by the train and validation DataLoaders."""
    kw: dict[str, Any] = {
        "batch_size": args.batch_size,
        "num_workers": args.num_workers,
        "pin_memory": device.type == "cuda",
    }
    if args.num_workers > 0:
        kw["persistent_workers"] = True
    return kw


def shuffle_generator(seed: int) -> torch.Generator:
    """A seeded generator for the training DataLoader's shuffling (deterministic order)."""
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def item_seed(seed: int, split: str, index: int) -> int:
    """Deterministic 63-bit seed for one synthetic sample, independent of worker and order."""
    split_code = zlib.crc32(split.encode())
    return (seed * 1_000_003 + split_code * 7_919 + index * 2_654_435_761) % (2**63 - 1)


def save_final_model(model: torch.nn.Module, name: str) -> str | None:
    """Write the trained weights to ``$TRAINWISE_MODEL_DIR/<name>.safetensors`` when a launcher asks
    for them (``trainwise launch`` sets the variable; plain runs save nothing). Rank 0 only under
    DDP; written to a temporary file and renamed, so a reader never sees half a model."""
    import os

    directory = os.environ.get("TRAINWISE_MODEL_DIR")
    if not directory or os.environ.get("RANK", "0") != "0":
        return None
    require("safetensors.torch", "saving the trained model (--save-model)")
    from safetensors.torch import save_file

    module = getattr(model, "module", model)  # unwrap DistributedDataParallel
    tensors = {key: value.detach().cpu().contiguous() for key, value in module.state_dict().items()}
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.safetensors")
    tmp = f"{path}.tmp"
    save_file(tensors, tmp)
    os.replace(tmp, path)
    return path


def is_distributed() -> bool:
    """Started by torchrun (or `trainwise run --engine ddp`) with more than one worker."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def distributed_setup(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """Under torchrun with several workers: join the process group (gloo on CPU, nccl on CUDA) from
    the environment torchrun sets and wrap the model in DistributedDataParallel; otherwise unchanged.
    --batch-size is then the per-worker batch (global batch = workers x batch size)."""
    if not is_distributed():
        return model
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def train_sampler_kwargs(dataset: Any, seed: int) -> dict[str, Any]:
    """Shuffling for the training DataLoader: a seeded generator, or under DDP a DistributedSampler
    (each worker its own shard of every epoch, reshuffled per epoch by `set_epoch`)."""
    if not is_distributed():
        return {"shuffle": True, "generator": shuffle_generator(seed)}
    from torch.utils.data.distributed import DistributedSampler

    return {"sampler": DistributedSampler(dataset, shuffle=True, seed=seed)}


def set_epoch(loader: Any, epoch: int) -> None:
    """Tell a DistributedSampler which epoch starts (a no-op for other samplers)."""
    sampler = getattr(loader, "sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def print_header(name: str, data_line: str, args: argparse.Namespace, model: torch.nn.Module) -> None:
    """The start-up lines: the data source first (a profiler/test looks for ``data: ``)."""
    print(data_line, flush=True)
    print(
        f"workload: {name} | params={count_parameters(model):,} | batch_size={args.batch_size} "
        f"| epochs={args.epochs} | train_samples={args.train_samples} | val_samples={args.val_samples} "
        f"| lr={args.lr:g} | device={args.device} | threads={torch.get_num_threads()} "
        f"| num_workers={args.num_workers}",
        flush=True,
    )


def print_epoch(
    epoch: int, epochs: int, train_loss: float, val_loss: float, val_acc: float, seconds: float
) -> None:
    print(
        f"epoch {epoch + 1}/{epochs} loss={train_loss:.4f} val_loss={val_loss:.4f} "
        f"val_acc={val_acc:.4f} time={seconds:.2f}s",
        flush=True,
    )


def argmax_correct(out: torch.Tensor, y: torch.Tensor) -> int:
    """Correct predictions of a multi-class classifier (one logit per class)."""
    return int((out.argmax(1) == y).sum().item())


def fit(
    model: torch.nn.Module,
    train_loader: Any,
    val_loader: Any,
    criterion: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    epochs: int,
    scheduler: Any = None,
    count_correct: Callable[[torch.Tensor, torch.Tensor], int] = argmax_correct,
) -> None:
    """Train for ``epochs``, validating after each one: the loop a user would write by hand."""
    for epoch in range(epochs):
        set_epoch(train_loader, epoch)
        start = time.perf_counter()
        model.train()
        train_loss, seen = 0.0, 0
        for x, y in train_loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            train_loss += loss.item() * y.size(0)
            seen += y.size(0)
        if scheduler is not None:
            scheduler.step()

        model.eval()
        val_loss, correct, total = 0.0, 0, 0
        with torch.no_grad():
            for x, y in val_loader:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                out = model(x)
                val_loss += criterion(out, y).item() * y.size(0)
                correct += count_correct(out, y)
                total += y.size(0)
        print_epoch(epoch, epochs, train_loss / max(seen, 1), val_loss / max(total, 1),
                    correct / max(total, 1), time.perf_counter() - start)
