"""ImageNet / ResNet-50 for 90 epochs: the job people rent GPUs for, on SYNTHETIC ImageNet-shaped data.

The recipe of He et al., "Deep Residual Learning for Image Recognition" (CVPR 2016) as Goyal et al.,
"Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" (2017) ran it as their baseline: ResNet-50,
1,281,167 training and 50,000 validation images of 3x224x224 in 1,000 classes, global batch 256,
momentum SGD (0.9) at lr 0.1, weight decay 1e-4, the lr divided by 10 at epochs 30, 60 and 80, 90 epochs.

`trainwise plan` (no --profile) profiles this script here on a small slice (a few steps at a small
batch: a CPU does one full-size step in about a minute) and characterises the full-size step (batch
256, 224x224) on the meta device for the device model; the plan is for the full-size job.

Data (SYNTHETIC, nothing downloaded): each class a fixed random low-frequency colour pattern; a sample
is its class pattern plus one of a small bank of noise images, picked per index — cheap to generate
(no JPEG decoding: a real ImageNet loader needs enough worker processes to keep up).

Run:  python -m trainwise.workloads.resnet50_imagenet --epochs 1 --batch-size 4 --train-samples 16 --val-samples 8
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
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

NAME = "resnet50_imagenet"
DEFAULTS = {
    "batch_size": 256,  # Goyal et al.: the batch-256 baseline (8 GPUs x 32)
    "epochs": 90,
    "train_samples": 1_281_167,  # ImageNet-1k (ILSVRC 2012) training set
    "val_samples": 50_000,
    "lr": 0.1,
}
NUM_CLASSES = 1000
IMAGE_SHAPE = (3, 224, 224)
LR_MILESTONES = (30, 60, 80)
NOISE_BANK = 16


def build_model() -> nn.Module:
    from trainwise.optional import require

    require("torchvision.models", "the resnet50_imagenet workload")
    from torchvision.models import resnet50

    return resnet50(num_classes=NUM_CLASSES, weights=None)


def build_optimizer(model: nn.Module, lr: float = DEFAULTS["lr"]) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)


class SyntheticImageNet(Dataset):
    """pattern[label] + noise_bank[index % NOISE_BANK]: ImageNet-shaped, learnable, bounded memory."""

    def __init__(self, length: int, seed: int, split: str):
        self.length, self.seed, self.split = length, seed, split
        g = torch.Generator().manual_seed(seed * 7 + 4_242)
        # 4x4 per class, upsampled per sample: 1,000 full-size patterns would hold 600 MB
        self.low = torch.randn(NUM_CLASSES, 3, 4, 4, generator=g)
        self.noise = torch.randn(NOISE_BANK, *IMAGE_SHAPE, generator=g)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        label = item_seed(self.seed, self.split, index) % NUM_CLASSES
        pattern = F.interpolate(self.low[label:label + 1], size=IMAGE_SHAPE[1:], mode="bilinear", align_corners=False)[0]
        return pattern + self.noise[index % NOISE_BANK], label


def build_datasets(train_samples: int = DEFAULTS["train_samples"], val_samples: int = DEFAULTS["val_samples"],
                   seed: int = 0) -> tuple[Dataset, Dataset, str]:
    """Return (train dataset, validation dataset, the ``data: ...`` source line)."""
    return (SyntheticImageNet(train_samples, seed, "train"), SyntheticImageNet(val_samples, seed, "val"),
            "data: synthetic (ImageNet-shaped, 3x224x224, 1,000 classes; class pattern + noise)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser("ResNet-50 on (synthetic) ImageNet-shaped images, 90 epochs (He et al. 2016; "
                          "Goyal et al. 2017).", **DEFAULTS)
    args = parse_args(parser, argv)
    if args.train_samples % args.batch_size == 1:
        parser.error("--train-samples % --batch-size must not be 1 (a 1-sample last batch breaks BatchNorm)")
    device = setup(args)
    train_ds, val_ds, data_line = build_datasets(args.train_samples, args.val_samples, seed=args.seed)
    model = build_model().to(device)
    print_header(NAME, data_line, args, model)
    train_loader = DataLoader(train_ds, shuffle=True, generator=shuffle_generator(args.seed), **loader_kwargs(args, device))
    val_loader = DataLoader(val_ds, shuffle=False, **loader_kwargs(args, device))
    criterion = nn.CrossEntropyLoss()
    optimizer = build_optimizer(model, args.lr)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=list(LR_MILESTONES), gamma=0.1)
    fit(model, train_loader, val_loader, criterion, optimizer, device, args.epochs, scheduler=scheduler)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
