"""IC-DR: InceptionV3 diabetic-retinopathy classifier (Künas' thesis and Künas et al., 2023) on SYNTHETIC images.

Sources:
  * Künas 2023 (thesis) §4.3 "Image classification" / Künas et al. 2023 §4 "Methodology": EyePACS
    fundus images, 5 classes (35,126 labelled images: 25,810 no DR, 2,443 mild, 5,292 moderate,
    873 severe, 708 proliferative), resized to 256x256; 28,000 training / 7,126 validation images.
  * 000 §4.3.1 "IC-DR Architecture" / 001 §4: Inception v3 body, then Global Average Pooling 2D,
    Dense 1024 ReLU, Dense 5 softmax; Adam, learning rate 0.0014; sparse categorical cross-entropy;
    callbacks reduce the learning rate on val_loss and checkpoint the best model (not reproduced:
    they do not change the per-iteration work).
  * 000 §6.2.3 / 001 §5.2 "Accuracy Evaluation": "trained the model on 28,000 samples and validated it
    on 7,126 samples, with a batch size of 32 and limiting to 25 epochs" (global batch 256 = 8 TPU
    cores x 32).

Differences from the seed, on purpose: the seed starts from ImageNet weights (transfer learning); we
use ``torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True)`` because
nothing may be downloaded; the per-iteration compute is the same. The torchvision head (avgpool ->
dropout -> fc 2048->1000) is replaced by the seed's head: global average pooling (kept) ->
Linear(2048, 1024) -> ReLU -> Linear(1024, 5).

CPU note: at the seed's 256x256 and batch 32 one training iteration takes tens of seconds on a 2-core
CPU (see ``trainwise.workloads.MEASURED_CPU_ITERATION_S``); use a small --batch-size there.

Data (SYNTHETIC, nothing downloaded): 3x256x256 "fundus-like" images (a bright disc on black) whose
class (drawn with the EyePACS class frequencies) shifts a smooth per-class colour pattern, plus noise;
generated lazily per index from a seeded generator (bounded memory, deterministic).

Run:  python -m trainwise.workloads.inceptionv3_dr --epochs 1 --batch-size 2 --train-samples 4 --val-samples 2
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainwise.optional import require
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

NAME = "inceptionv3_dr"
DEFAULTS = {
    "batch_size": 32,  # 000 §6.2.3, 001 §5.2 (per device; 256 global on the 8-core TPU)
    "epochs": 25,  # 000 §6.2.3, 001 §5.2
    "train_samples": 28_000,  # 000 §4.3
    "val_samples": 7_126,  # 000 §4.3
    "lr": 0.0014,  # 000 §4.3.1, Adam
}
NUM_CLASSES = 5
IMAGE_SIZE = 256
# EyePACS training-set class counts (000 §4.3): no DR, mild, moderate, severe, proliferative.
CLASS_COUNTS = (25_810, 2_443, 5_292, 873, 708)


def build_model() -> nn.Module:
    require("torchvision.models", "the inceptionv3_dr workload")
    from torchvision.models import inception_v3

    model = inception_v3(weights=None, aux_logits=False, init_weights=True)
    # Seed head: GlobalAveragePooling2D (torchvision's avgpool) -> Dense 1024 ReLU -> Dense 5.
    model.dropout = nn.Identity()
    model.fc = nn.Sequential(
        nn.Linear(2048, 1024),
        nn.ReLU(inplace=True),
        nn.Linear(1024, NUM_CLASSES),
    )
    return model


def build_optimizer(model: nn.Module, lr: float = DEFAULTS["lr"]) -> torch.optim.Optimizer:
    # Keras Adam epsilon is 1e-7.
    return torch.optim.Adam(model.parameters(), lr=lr, eps=1e-7)


def _fundus_mask(size: int = IMAGE_SIZE) -> torch.Tensor:
    c = (size - 1) / 2.0
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                            indexing="ij")
    r = torch.sqrt((yy - c) ** 2 + (xx - c) ** 2) / (0.47 * size)
    return (1.0 - r.clamp(max=1.0) ** 8).clamp(min=0.0)  # soft-edged disc


class SyntheticFundus(Dataset):
    """Lazily generated 3x256x256 fundus-like images with EyePACS-frequency labels."""

    def __init__(self, length: int, seed: int, split: str):
        self.length = length
        self.seed = seed
        self.split = split
        g = torch.Generator().manual_seed(seed * 11 + 424_242)
        low = torch.randn(NUM_CLASSES, 3, 8, 8, generator=g)
        self.patterns = 0.5 * F.interpolate(low, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear",
                                            align_corners=False)
        self.base = torch.tensor([0.8, 0.35, 0.15]).view(3, 1, 1)  # reddish-orange fundus colour
        self.mask = _fundus_mask()
        w = torch.tensor(CLASS_COUNTS, dtype=torch.float64)
        self.cumulative = (w / w.sum()).cumsum(0).tolist()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        g = torch.Generator().manual_seed(item_seed(self.seed, self.split, index))
        u = torch.rand(1, generator=g).item()
        label = next((c for c, edge in enumerate(self.cumulative) if u < edge), NUM_CLASSES - 1)
        noise = torch.randn(3, IMAGE_SIZE // 4, IMAGE_SIZE // 4, generator=g)
        noise = F.interpolate(noise.unsqueeze(0), scale_factor=4, mode="nearest").squeeze(0)
        img = (self.base + self.patterns[label] + 0.3 * noise) * self.mask
        return img, label


def build_datasets(
    train_samples: int = DEFAULTS["train_samples"],
    val_samples: int = DEFAULTS["val_samples"],
    seed: int = 0,
) -> tuple[Dataset, Dataset, str]:
    """Return (train dataset, validation dataset, the ``data: ...`` source line)."""
    line = (
        "data: synthetic (EyePACS-shaped fundus-like images, 3x256x256, 5 DR grades "
        "with EyePACS class frequencies)"
    )
    return SyntheticFundus(train_samples, seed, "train"), SyntheticFundus(val_samples, seed, "val"), line


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(
        "InceptionV3 diabetic-retinopathy classifier (5 grades, 256x256) trained with Adam, "
        "per Künas' thesis and Künas et al. (2023).",
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
    criterion = nn.CrossEntropyLoss()  # sparse categorical cross-entropy on integer labels
    optimizer = build_optimizer(model, args.lr)

    fit(model, train_loader, val_loader, criterion, optimizer, device, args.epochs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
