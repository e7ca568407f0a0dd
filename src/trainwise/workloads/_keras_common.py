"""Plumbing shared by the Keras ports of the seed workloads (command line, backend, seeding).

Keras picks its backend from ``KERAS_BACKEND`` when it is first imported; these scripts default it to
``torch`` (trainwise's own dependency) and otherwise leave it alone, so the same script runs on JAX or
TensorFlow with ``KERAS_BACKEND=jax`` / ``tensorflow``. Nothing here imports trainwise profiling code:
under ``trainwise profile`` the profiler adds its callback to ``Model.fit`` by itself.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any
from trainwise.optional import require


def build_parser(description: str, *, batch_size: int, epochs: int, train_samples: int, val_samples: int,
                 lr: float) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batch-size", type=int, default=batch_size, help=f"batch size (seed default {batch_size})")
    p.add_argument("--epochs", type=int, default=epochs, help=f"number of epochs (seed default {epochs})")
    p.add_argument("--train-samples", type=int, default=train_samples, help=f"training-set size (seed default {train_samples})")
    p.add_argument("--val-samples", type=int, default=val_samples, help=f"validation-set size (seed default {val_samples})")
    p.add_argument("--lr", type=float, default=lr, help=f"learning rate (seed default {lr})")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads of the torch backend (default: torch's)")
    p.add_argument("--seed", type=int, default=0, help="seed for data generation, init and shuffling")
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2), help="Keras fit verbosity (default 2: a line per epoch)")
    return p


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    for name in ("batch_size", "epochs", "train_samples", "val_samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    if args.lr <= 0:
        parser.error("--lr must be > 0")
    return args


def import_keras(args: argparse.Namespace) -> Any:
    """Import Keras (torch backend unless KERAS_BACKEND says otherwise), apply --threads and --seed."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    require("keras", "the Keras workloads")
    import keras

    if args.threads is not None and keras.config.backend() == "torch":
        import torch  # only to set the thread count of the backend the user chose

        torch.set_num_threads(args.threads)
    keras.utils.set_random_seed(args.seed)
    return keras
