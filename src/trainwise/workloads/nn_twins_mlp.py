"""NN-TWINS: I/O access-pattern MLP (Künas' MSc thesis, UFRGS 2023) on SYNTHETIC tabular data of the thesis' shape.

Source (Künas 2023 (thesis)):
  * §4.1 "I/O Access Pattern Detector": ~39,000 observations of 5 metrics (request size minimum,
    average and maximum; number of file identifiers; average distance between consecutive requests
    to the same file), 3 classes (file-per-process contiguous, shared-file contiguous, shared-file
    1D-strided).
  * §4.1.1 "NN-TWINS Architecture": Yeo-Johnson power transform, scaling and centring of the inputs;
    "three layers: an input layer with all five features, a hidden layer with the same number of
    neurons, and an output layer with three units ... The first two layers use ReLU ... with a normal
    kernel initialization ... The output layer uses softmax"; "RMSProp, with a learning rate of 0.001
    and momentum of 0.9"; categorical cross-entropy; 70 % / 30 % train/test split.
  * §6.2.1 "Accuracy Evaluation - NN-TWINS": "27,238 samples and tested it on 11,674 samples, with a
    batch size of 32 and limiting to 50 epochs" (global batch 256 on the 8-core TPU).

Model (Keras layers read as Dense layers): Linear(5, 5) ReLU -> Linear(5, 5) ReLU -> Linear(5, 3)
(softmax folded into the cross-entropy loss); weights ~ N(0, 0.05) (Keras "normal"), zero biases.
RMSprop with Keras' constants (rho 0.9, epsilon 1e-7) and momentum 0.9.

Data (SYNTHETIC, the real TWINS traces are not bundled): each row is a plausible observation of one of
the three access patterns (request sizes log-uniform 1 KiB-16 MiB, file-per-process runs with many
file ids, strided runs with a gap of (processes - 1) x request size), with multiplicative noise and
1 % label noise; then the seed's Yeo-Johnson + standardisation (scikit-learn PowerTransformer fitted
on the training rows). Generated once, deterministically, into tensors.

Run:  python -m trainwise.workloads.nn_twins_mlp --epochs 1 --train-samples 1024 --val-samples 512
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from trainwise.optional import require
from trainwise.workloads.synthetic_data import NUM_CLASSES, NUM_FEATURES, synth_access_patterns  # noqa: F401 - re-exported
from trainwise.workloads._common import (
    build_parser,
    distributed_setup,
    fit,
    loader_kwargs,
    parse_args,
    print_header,
    setup,
    train_sampler_kwargs,
)

NAME = "nn_twins_mlp"
DEFAULTS = {
    "batch_size": 32,  # §6.2.1
    "epochs": 50,  # §6.2.1
    "train_samples": 27_238,  # §6.2.1
    "val_samples": 11_674,  # §6.2.1 (test set used as validation)
    "lr": 0.001,  # §4.1.1, RMSProp
}
FEATURE_NAMES = ("req_size_min", "req_size_avg", "req_size_max", "n_file_ids", "avg_req_distance")


class TwinsMLP(nn.Module):
    def __init__(self, in_features: int = NUM_FEATURES, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, in_features),
            nn.ReLU(),
            nn.Linear(in_features, in_features),
            nn.ReLU(),
            nn.Linear(in_features, num_classes),
        )
        for m in self.net:
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=0.05)  # Keras "normal" initializer
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build_model() -> nn.Module:
    return TwinsMLP()


def build_optimizer(model: nn.Module, lr: float = DEFAULTS["lr"]) -> torch.optim.Optimizer:
    return torch.optim.RMSprop(model.parameters(), lr=lr, alpha=0.9, eps=1e-7, momentum=0.9)


def build_datasets(
    train_samples: int = DEFAULTS["train_samples"],
    val_samples: int = DEFAULTS["val_samples"],
    seed: int = 0,
) -> tuple[Dataset, Dataset, str]:
    """Return (train dataset, validation dataset, the ``data: ...`` source line)."""
    require("sklearn.preprocessing", "the nn_twins_mlp workload")
    from sklearn.preprocessing import PowerTransformer

    rng = np.random.default_rng(seed)
    x, y = synth_access_patterns(train_samples + val_samples, rng)
    pt = PowerTransformer(method="yeo-johnson", standardize=True)
    x_train = pt.fit_transform(x[:train_samples])
    x_val = pt.transform(x[train_samples:])
    train = TensorDataset(torch.from_numpy(x_train.astype(np.float32)), torch.from_numpy(y[:train_samples]))
    val = TensorDataset(torch.from_numpy(x_val.astype(np.float32)), torch.from_numpy(y[train_samples:]))
    line = (
        "data: synthetic (TWINS-shaped I/O access-pattern table: 5 metrics, 3 classes; "
        "Yeo-Johnson + standardised as in the seed)"
    )
    return train, val, line


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(
        "NN-TWINS access-pattern MLP (5-5-5-3) trained with RMSProp, per Künas' MSc thesis (UFRGS 2023).",
        **DEFAULTS,
    )
    args = parse_args(parser, argv)
    device = setup(args)

    train_ds, val_ds, data_line = build_datasets(args.train_samples, args.val_samples, seed=args.seed)
    model = distributed_setup(build_model().to(device), device)
    print_header(NAME, data_line, args, model)

    train_loader = DataLoader(
        train_ds, **train_sampler_kwargs(train_ds, args.seed), **loader_kwargs(args, device)
    )
    val_loader = DataLoader(val_ds, shuffle=False, **loader_kwargs(args, device))
    criterion = nn.CrossEntropyLoss()
    optimizer = build_optimizer(model, args.lr)

    fit(model, train_loader, val_loader, criterion, optimizer, device, args.epochs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
