"""Seismic / FCN reference workload (Malta, 'Selecting Efficient Virtual Machines for Training Deep Learning Models on the Cloud', 2021) on SYNTHETIC seismic-like patches.

Source (Malta 2021):
  * §4.1 "Experimental Setup": "trains a Full Convolutional LeNet network (FCN) [LeCun 1998] to
    identify diffraction apexes on seismic images. This application is a binary classification
    problem. The training/validation dataset contains 40,512/212 images. These images have 64 x 64
    pixels. ... Momentum Stochastic Gradient Descent ...; the learning rate starts with 0.1 and is
    gradually decreased to 0.01 during the training. The application also uses the Dropout
    regularization."
  * §5.1, Table 5.1: batch 256 / 512 / 1024 / 2048 -> 13 / 14 / 14 / 16 epochs (Table 5.2 measures
    the p2.xlarge runs with 13 / 11 / 12 / 16 epochs).

The layer widths are not given in the seed; we use Caffe's LeNet widths (conv 20 5x5, pool, conv 50
5x5, pool, "dense" 500, output 2) with the dense layers written as convolutions (fully convolutional):
Conv(1->20, 5) ReLU MaxPool2 -> Conv(20->50, 5) ReLU MaxPool2 -> Conv(50->500, 13) ReLU Dropout 0.5 ->
Conv 1x1 (500->2). On a 64x64 patch the output map is 1x1 (one apex / not-apex decision); on a larger
section the same network yields a dense apex map, which is how the application scans seismic images.
Momentum 0.9; the learning rate decays linearly per epoch from --lr to --lr/10 (0.1 -> 0.01).

Data (SYNTHETIC, clearly not the seed's proprietary seismic data): each 1x64x64 patch is noise plus 1-3
diffraction hyperbolas t(x) = sqrt(t0^2 + k (x - x0)^2) drawn with a Ricker-like wavelet. The
segmentation-like target is whether the patch centre is a diffraction apex: label 1 patches have a
hyperbola whose apex lies within 1 px of the centre, label 0 patches only have apexes away from it.
Patches are generated lazily per index from a seeded generator (bounded memory, deterministic).

Run:  python -m trainwise.workloads.seismic_fcn --epochs 1 --train-samples 512 --val-samples 212
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainwise.workloads._common import (
    build_parser,
    fit,
    item_seed,
    loader_kwargs,
    parse_args,
    print_header,
    setup,
    shuffle_generator,
)

NAME = "seismic_fcn"
DEFAULTS = {
    "batch_size": 256,  # Table 5.1 / 5.2
    "epochs": 13,  # Table 5.1, batch 256
    "train_samples": 40_512,  # §4.1
    "val_samples": 212,  # §4.1
    "lr": 0.1,  # §4.1, momentum SGD, decayed to 0.01
}
IMAGE_SIZE = 64
FINAL_LR_FRACTION = 0.1  # 0.1 -> 0.01 (§4.1)


class LeNetFCN(nn.Module):
    """A fully convolutional LeNet: the dense layers are convolutions, so the output is a map."""

    def __init__(self, num_classes: int = 2) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 20, kernel_size=5),  # 64 -> 60
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),  # 30
            nn.Conv2d(20, 50, kernel_size=5),  # 26
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),  # 13
        )
        self.head = nn.Sequential(
            nn.Conv2d(50, 500, kernel_size=13),  # "dense 500" as a 13x13 convolution -> 1x1
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Conv2d(500, num_classes, kernel_size=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.head(self.features(x))  # N x 2 x H' x W' (1x1 for a 64x64 patch)
        if out.shape[-2:] == (1, 1):
            return out.flatten(1)
        return out


def build_model() -> nn.Module:
    return LeNetFCN()


def build_optimizer(model: nn.Module, lr: float = DEFAULTS["lr"]) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def build_scheduler(optimizer: torch.optim.Optimizer, epochs: int) -> torch.optim.lr_scheduler.LRScheduler:
    """Linear per-epoch decay from lr to lr * 0.1 over the run (§4.1: 0.1 gradually down to 0.01)."""
    return torch.optim.lr_scheduler.LinearLR(
        optimizer, start_factor=1.0, end_factor=FINAL_LR_FRACTION, total_iters=max(epochs - 1, 1)
    )


_T = torch.arange(IMAGE_SIZE, dtype=torch.float32).view(-1, 1)  # time (rows)
_X = torch.arange(IMAGE_SIZE, dtype=torch.float32).view(1, -1)  # offset (columns)


def synth_patch(seed: int) -> tuple[torch.Tensor, int]:
    """One synthetic 1x64x64 seismic-like patch and its apex-at-centre label, from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(16, generator=g).tolist()
    label = int(r[0] < 0.5)
    img = 0.3 * torch.randn(IMAGE_SIZE, IMAGE_SIZE, generator=g)
    centre = (IMAGE_SIZE - 1) / 2.0
    apexes: list[tuple[float, float]] = []
    if label == 1:
        apexes.append((centre + (r[1] - 0.5) * 2.0, centre + (r[2] - 0.5) * 2.0))
    for j in range(int(r[3] * 3) + (0 if label else 1)):  # 0-2 extra (label 1) / 1-3 (label 0)
        # apex at least 8 px away from the centre
        angle = 2 * math.pi * r[4 + 2 * j]
        dist = 8.0 + r[5 + 2 * j] * 20.0
        apexes.append((centre + dist * math.cos(angle), centre + dist * math.sin(angle)))
    for k, (x0, t0) in enumerate(apexes):
        curvature = 0.5 + 2.0 * r[10 + k % 5]
        t_curve = torch.sqrt(t0 * t0 + curvature * (_X - x0) ** 2)  # 1 x W
        d = (_T - t_curve) / 1.5
        img += (1.0 - 2.0 * d * d) * torch.exp(-d * d)  # Ricker-like wavelet along the hyperbola
    return img.unsqueeze(0), label


class SyntheticSeismic(Dataset):
    """Lazily generated, deterministic synthetic seismic patches (see module docstring)."""

    def __init__(self, length: int, seed: int, split: str):
        self.length = length
        self.seed = seed
        self.split = split

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        return synth_patch(item_seed(self.seed, self.split, index))


def build_datasets(
    train_samples: int = DEFAULTS["train_samples"],
    val_samples: int = DEFAULTS["val_samples"],
    seed: int = 0,
) -> tuple[Dataset, Dataset, str]:
    """Return (train dataset, validation dataset, the ``data: ...`` source line)."""
    line = (
        "data: synthetic (seismic-like 1x64x64 patches with diffraction hyperbolas; "
        "target: apex at patch centre, binary)"
    )
    return SyntheticSeismic(train_samples, seed, "train"), SyntheticSeismic(val_samples, seed, "val"), line


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(
        "Fully convolutional LeNet finding diffraction apexes in (synthetic) seismic patches, "
        "per Malta's MSc dissertation (UNICAMP 2021).",
        **DEFAULTS,
    )
    args = parse_args(parser, argv)
    device = setup(args)

    train_ds, val_ds, data_line = build_datasets(args.train_samples, args.val_samples, seed=args.seed)
    model = build_model().to(device)
    print_header(NAME, data_line, args, model)

    train_loader = DataLoader(
        train_ds, shuffle=True, generator=shuffle_generator(args.seed), **loader_kwargs(args, device)
    )
    val_loader = DataLoader(val_ds, shuffle=False, **loader_kwargs(args, device))
    criterion = nn.CrossEntropyLoss()
    optimizer = build_optimizer(model, args.lr)
    scheduler = build_scheduler(optimizer, args.epochs)

    fit(model, train_loader, val_loader, criterion, optimizer, device, args.epochs, scheduler=scheduler)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
