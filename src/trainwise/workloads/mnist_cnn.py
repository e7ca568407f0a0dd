"""MNIST / Simple-CNN reference workload (Malta, 'Selecting Efficient Virtual Machines for Training Deep Learning Models on the Cloud', 2021).

Source (Malta 2021):
  * §4.4 "Methodology's Validation": "the MNIST/Simple-CNN, which trains a simple two-layer CNN to
    classify images from the MNIST dataset".
  * §5.1 "Experimental Setup": "simple two-convolutional layer model ... Dropout regularization and the
    Adadelta optimizer, starting with a learning rate of 0.001"; batches of 256, 512, 1024 and 2048;
    Table 5.1: 15 / 17 / 22 / 28 epochs and 195 / 98 / 49 / 25 iterations per epoch.
  * §5.4: "validation dataset (10,000 samples) is 20% of the size of its training dataset (50,000)".

The architecture is the Keras "simple convnet" MNIST example Malta's "Simple-CNN" refers to:
Conv(32, 3x3, ReLU) -> Conv(64, 3x3, ReLU) -> MaxPool 2x2 -> Dropout 0.25 -> Dense 128 ReLU ->
Dropout 0.5 -> Dense 10 (softmax folded into the cross-entropy loss). Adadelta uses Keras' constants
(rho 0.95, epsilon 1e-7) with the seed's learning rate 0.001 (PyTorch's default would be 1.0).

Data: nothing is downloaded.
  * default: REAL handwritten digits, the UCI optical-recognition digits test set (Alpaydin and Kaynak;
    1,797 8x8 images), packaged as ``data/digits.csv.gz`` (the copy scikit-learn's ``load_digits`` reads),
    upsampled to 28x28 with ``torch.nn.functional.interpolate`` and scaled to [0, 1]; the digits are
    split 80/20 into disjoint train/validation pools; a pool is repeated to the requested size, every
    repetition after the first shifted by up to +-2 px and rescaled in intensity, deterministically
    from (seed, index).
  * ``--mnist-dir DIR``: the real MNIST from the standard IDX files in DIR (train-images-idx3-ubyte,
    train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte; ``.gz`` accepted):
    training samples from the train files, validation samples from the t10k files.

Run:  python -m trainwise.workloads.mnist_cnn --epochs 1 --train-samples 512 --val-samples 256
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainwise.workloads._common import (
    build_parser,
    distributed_setup,
    fit,
    item_seed,
    loader_kwargs,
    parse_args,
    print_header,
    save_final_model,
    setup,
    train_sampler_kwargs,
)

NAME = "mnist_cnn"
DEFAULTS = {
    "batch_size": 256,  # smallest batch studied; Table 5.1
    "epochs": 15,  # Table 5.1, batch 256
    "train_samples": 50_000,  # §5.4
    "val_samples": 10_000,  # §5.4
    "lr": 0.001,  # §5.1, Adadelta
}
NUM_CLASSES = 10
IMAGE_SIZE = 28


class SimpleCNN(nn.Module):
    """The Keras "simple convnet" for MNIST: two conv layers, one hidden dense layer, dropout."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Dropout(0.25),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 12 * 12, 128),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def build_model() -> nn.Module:
    return SimpleCNN()


def build_optimizer(model: nn.Module, lr: float = DEFAULTS["lr"]) -> torch.optim.Optimizer:
    # Keras Adadelta constants: rho=0.95, epsilon=1e-7.
    return torch.optim.Adadelta(model.parameters(), lr=lr, rho=0.95, eps=1e-7)


# --------------------------------------------------------------------------------------------
# Data: scikit-learn digits (default)
# --------------------------------------------------------------------------------------------


def load_digit_pools(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 1,797 packaged digits upsampled to 1x28x28 in [0, 1], split 80/20 (disjoint pools)."""
    with resources.files("trainwise.workloads").joinpath("data/digits.csv.gz").open("rb") as raw, \
            gzip.open(raw) as handle:
        table = np.loadtxt(handle, delimiter=",")  # 64 pixels (0..16) then the label, per row
    images = torch.from_numpy(table[:, :-1].reshape(-1, 8, 8).astype(np.float32) / 16.0).unsqueeze(1)  # N,1,8,8
    images = F.interpolate(images, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False)
    images = images.clamp_(0.0, 1.0).contiguous()
    labels = torch.from_numpy(table[:, -1].astype(np.int64))
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(labels), generator=g)
    n_val = len(labels) // 5
    val_idx, train_idx = order[:n_val], order[n_val:]
    return images[train_idx], labels[train_idx], images[val_idx], labels[val_idx]


class RepeatedDigits(Dataset):
    """A pool of real digit images repeated to ``length`` samples.

    Index ``i`` reads pool image ``i % len(pool)``; every repetition after the first (``i >= len(pool)``)
    is shifted by up to +-2 pixels and scaled in intensity, deterministically from (seed, split, i).
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, length: int, seed: int, split: str):
        self.images = images
        self.labels = labels
        self.length = length
        self.seed = seed
        self.split = split

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        pool = len(self.labels)
        base = index % pool
        img = self.images[base]
        if index >= pool:
            h = item_seed(self.seed, self.split, index)
            dx = h % 5 - 2
            dy = (h // 5) % 5 - 2
            scale = 0.75 + 0.05 * ((h // 25) % 6)  # 0.75 .. 1.00
            padded = F.pad(img, (2, 2, 2, 2))
            img = padded[:, 2 + dy : 2 + dy + IMAGE_SIZE, 2 + dx : 2 + dx + IMAGE_SIZE] * scale
        return img, self.labels[base]


# --------------------------------------------------------------------------------------------
# Data: real MNIST from IDX files (--mnist-dir)
# --------------------------------------------------------------------------------------------

_IDX_FILES = {
    "train_images": ("train-images-idx3-ubyte", "train-images.idx3-ubyte"),
    "train_labels": ("train-labels-idx1-ubyte", "train-labels.idx1-ubyte"),
    "val_images": ("t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"),
    "val_labels": ("t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"),
}


def _find_idx(directory: Path, names: Sequence[str]) -> Path:
    for name in names:
        for candidate in (directory / name, directory / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(
        f"none of {', '.join(names)} (optionally .gz) found in {directory}; "
        "--mnist-dir must hold the four standard MNIST IDX files"
    )


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed) of unsigned bytes into a numpy array."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read()
    if len(data) < 4:
        raise ValueError(f"{path}: too short for an IDX file")
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    dims = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    count = int(np.prod(dims)) if dims else 0
    body = np.frombuffer(data, dtype=np.uint8, count=count, offset=4 + 4 * ndim)
    return body.reshape(dims)


class IDXImages(Dataset):
    """MNIST images (uint8 N x 28 x 28) and labels; repeats cyclically up to ``length`` samples."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, length: int):
        if images.ndim != 3 or len(images) != len(labels) or len(images) == 0:
            raise ValueError("IDX images must be N x H x W with one label per image")
        self.images = torch.from_numpy(images.copy())
        self.labels = torch.from_numpy(labels.astype(np.int64))
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        i = index % len(self.labels)
        return self.images[i].unsqueeze(0).float().div_(255.0), self.labels[i]


def build_datasets(
    train_samples: int = DEFAULTS["train_samples"],
    val_samples: int = DEFAULTS["val_samples"],
    seed: int = 0,
    mnist_dir: str | Path | None = None,
) -> tuple[Dataset, Dataset, str]:
    """Return (train dataset, validation dataset, the ``data: ...`` source line)."""
    if mnist_dir is not None:
        d = Path(mnist_dir)
        files = {key: _find_idx(d, names) for key, names in _IDX_FILES.items()}
        train = IDXImages(read_idx(files["train_images"]), read_idx(files["train_labels"]), train_samples)
        val = IDXImages(read_idx(files["val_images"]), read_idx(files["val_labels"]), val_samples)
        note = ""
        if train_samples > len(train.labels) or val_samples > len(val.labels):
            note = ", repeated cyclically to the requested size"
        line = (
            f"data: real (MNIST IDX files from {d}; {len(train.labels)} train / {len(val.labels)} t10k "
            f"images, 1x28x28{note})"
        )
        return train, val, line
    tr_x, tr_y, va_x, va_y = load_digit_pools(seed)
    train = RepeatedDigits(tr_x, tr_y, train_samples, seed, "train")
    val = RepeatedDigits(va_x, va_y, val_samples, seed, "val")
    line = (
        "data: real (scikit-learn digits, upsampled to 28x28; "
        f"{len(tr_y)}/{len(va_y)} distinct train/val digits, deterministically shifted repeats)"
    )
    return train, val, line


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(
        "MNIST Simple-CNN (Keras simple convnet) trained with Adadelta, per Malta's MSc dissertation (UNICAMP 2021).",
        **DEFAULTS,
    )
    parser.add_argument("--mnist-dir", default=None,
                        help="directory with the MNIST IDX files; default: scikit-learn digits")
    args = parse_args(parser, argv)
    device = setup(args)

    train_ds, val_ds, data_line = build_datasets(
        args.train_samples, args.val_samples, seed=args.seed, mnist_dir=args.mnist_dir
    )
    model = distributed_setup(build_model().to(device), device)
    print_header(NAME, data_line, args, model)

    train_loader = DataLoader(
        train_ds, **train_sampler_kwargs(train_ds, args.seed), **loader_kwargs(args, device)
    )
    val_loader = DataLoader(val_ds, shuffle=False, **loader_kwargs(args, device))
    criterion = nn.CrossEntropyLoss()
    optimizer = build_optimizer(model, args.lr)

    fit(model, train_loader, val_loader, criterion, optimizer, device, args.epochs)
    save_final_model(model, NAME)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
