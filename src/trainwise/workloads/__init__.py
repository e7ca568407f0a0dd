"""Reference training workloads of the papers trainwise builds on (Malta; Künas; Künas et al.), as plain PyTorch training scripts.

Each workload is a module runnable as ``python -m trainwise.workloads.<name> [ARGS]`` and importable
(``build_model()``, ``build_datasets(train_samples, val_samples, seed)``, ``build_optimizer(model, lr)``,
``main(argv)``, ``DEFAULTS``). The scripts use only the standard idioms an outside profiler hooks
(``DataLoader`` iteration, ``optimizer.step()``, ``model.eval()`` + ``torch.no_grad()`` validation once
per epoch, ``for epoch in range(epochs)``) and never import trainwise profiling code.

Common command line: ``--batch-size --epochs --train-samples --val-samples --lr --num-workers --threads
--seed --device`` (``mnist_cnn`` also takes ``--mnist-dir``). Each script first prints one
``data: real (...)`` / ``data: synthetic (...)`` line, then one summary line per epoch.

Importing this package does not import torch; the workload modules do.

``MEASURED_CPU_ITERATION_S`` (measured_cpu_iteration_s): steady-state seconds per training iteration
(data loading + forward + backward + optimizer step; the median of the iterations after the
warm-up ones) on this project's 2-core development CPU (torch 2.14.1, default 2 threads, num_workers=0),
at the paper's default batch size and at half of it (2-core CPU; no GPU). The machine is shared, so
the figures are indicative (+-30 %); ``MEASURED_CPU_NOTES`` gives the spread seen and, per workload,
what a full CPU run at the paper's size would take and how to size a 3-10 minute one (ResNet-50 and
InceptionV3 at the papers' sizes are impractical on CPU: ~14 h and ~70 h).

=================  ==========  ===========  =============
workload           batch       s/it         s/it (half)
=================  ==========  ===========  =============
mnist_cnn          256         0.41         0.18 (128)
seismic_fcn        256         1.30         0.65 (128)
resnet50_cifar10   256         2.97         1.57 (128)
inceptionv3_dr     32          11.5         5.1 (16)
nn_twins_mlp       32          0.0015       0.0014 (16)
rnn_sa_lstm        1024        5.0          2.35 (512)
=================  ==========  ===========  =============

Use them to size CPU benchmark runs: a full run takes about
``T(init) + epochs * ceil(train_samples / batch) * s_per_it + validation``; for a 3-10 minute run
pick ``--train-samples`` / ``--epochs`` accordingly. Re-measure with
``python -m trainwise.workloads.measure``.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

from trainwise.optional import missing_extra

__all__ = [
    "DEFAULT_WORKLOAD",
    "MEASURED_CPU_ITERATION_S",
    "MEASURED_CPU_NOTES",
    "WORKLOADS",
    "WorkloadSpec",
    "check_requirements",
    "command_for",
    "get_workload",
    "workload_names",
]

DataKind = Literal["real", "synthetic"]


@dataclass(frozen=True)
class WorkloadSpec:
    """One reference workload: what it is, where its numbers come from, and its seed defaults."""

    name: str
    module: str
    description: str
    seed_source: str
    data_kind: DataKind
    data_description: str
    default_batch_size: int
    default_epochs: int
    default_train_samples: int
    default_val_samples: int
    hyperparameters: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # optional modules the workload imports (an extra of trainwise): checked before its process starts
    requires: tuple[str, ...] = ()

    @property
    def iterations_per_epoch(self) -> int:
        """ceil(default_train_samples / default_batch_size)."""
        return -(-self.default_train_samples // self.default_batch_size)


_PKG = __name__

WORKLOADS: dict[str, WorkloadSpec] = {
    spec.name: spec
    for spec in (
        WorkloadSpec(
            name="mnist_cnn",
            module=f"{_PKG}.mnist_cnn",
            description="MNIST / Simple-CNN (Keras simple convnet: 2 conv + dense 128, dropout), Adadelta",
            seed_source=(
                "Malta 2021 §4.4 and §5.1 (architecture, Adadelta lr 0.001, "
                "dropout), Table 5.1 (batch 256/512/1024/2048 -> 15/17/22/28 epochs), §5.4 (50,000 "
                "train / 10,000 validation)"
            ),
            data_kind="real",
            data_description=(
                "scikit-learn's bundled handwritten digits (1,797 8x8) upsampled to 1x28x28, disjoint "
                "80/20 train/val pools repeated with deterministic +-2 px shifts; or real MNIST from "
                "IDX files with --mnist-dir"
            ),
            default_batch_size=256,
            default_epochs=15,
            default_train_samples=50_000,
            default_val_samples=10_000,
            hyperparameters={
                "optimizer": "Adadelta",
                "lr": 0.001,
                "rho": 0.95,
                "eps": 1e-7,
                "loss": "categorical cross-entropy",
                "architecture": "Conv32-3x3 ReLU, Conv64-3x3 ReLU, MaxPool2, Dropout .25, Dense128 ReLU, "
                "Dropout .5, Dense10",
                "input_shape": (1, 28, 28),
                "num_classes": 10,
                "batch_sizes_studied": (256, 512, 1024, 2048),
                "epochs_by_batch": {256: 15, 512: 17, 1024: 22, 2048: 28},
                "iterations_per_epoch_by_batch": {256: 195, 512: 98, 1024: 49, 2048: 25},
            },
        ),
        WorkloadSpec(
            name="resnet50_imagenet",
            requires=("torchvision.models",),
            module=f"{_PKG}.resnet50_imagenet",
            description="ImageNet / ResNet-50, 90 epochs, momentum SGD (the default job of `trainwise plan`)",
            seed_source=(
                "He et al., Deep Residual Learning for Image Recognition (CVPR 2016); Goyal et al., Accurate, "
                "Large Minibatch SGD: Training ImageNet in 1 Hour (2017): batch 256, lr 0.1, /10 at 30/60/80, 90 epochs"
            ),
            data_kind="synthetic",
            data_description="ImageNet-shaped 3x224x224 images, 1,000 classes (class pattern + noise), generated per index",
            default_batch_size=256,
            default_epochs=90,
            default_train_samples=1_281_167,
            default_val_samples=50_000,
            hyperparameters={"optimizer": "SGD", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4,
                             "lr_milestones": (30, 60, 80), "input_shape": (3, 224, 224), "num_classes": 1000,
                             "characterise_as": "resnet50",
                             # ILSVRC2012_img_train.tar 138 GB + ILSVRC2012_img_val.tar 6.3 GB (image-net.org)
                             "dataset_gb": 144.3, "dataset_gb_source": "ImageNet-1k as published: train 138 GB + val 6.3 GB"},
        ),
        WorkloadSpec(
            name="seismic_fcn",
            module=f"{_PKG}.seismic_fcn",
            description="Seismic diffraction-apex detection with a fully convolutional LeNet, momentum SGD",
            seed_source=(
                "Malta 2021 §4.1 (FCN LeNet, binary, 40,512/212 images of "
                "64x64, momentum SGD lr 0.1 -> 0.01, dropout), Table 5.1 (batch 256/512/1024/2048 -> "
                "13/14/14/16 epochs), Table 5.2 (measured p2.xlarge runs)"
            ),
            data_kind="synthetic",
            data_description=(
                "synthetic seismic-like 1x64x64 patches (noise + diffraction hyperbolas); target: apex "
                "at the patch centre (binary, segmentation-like); generated lazily per index"
            ),
            default_batch_size=256,
            default_epochs=13,
            default_train_samples=40_512,
            default_val_samples=212,
            hyperparameters={
                "optimizer": "SGD",
                "momentum": 0.9,
                "lr": 0.1,
                "lr_final": 0.01,
                "lr_schedule": "linear per epoch (Malta: 'gradually decreased')",
                "dropout": 0.5,
                "loss": "cross-entropy (2 classes)",
                "architecture": "Conv20-5x5 ReLU MaxPool2, Conv50-5x5 ReLU MaxPool2, Conv500-13x13 ReLU "
                "Dropout, Conv2-1x1 (Caffe LeNet widths; Malta gives none)",
                "input_shape": (1, 64, 64),
                "num_classes": 2,
                "batch_sizes_studied": (256, 512, 1024, 2048),
                "epochs_by_batch": {256: 13, 512: 14, 1024: 14, 2048: 16},
            },
        ),
        WorkloadSpec(
            name="resnet50_cifar10",
            requires=("torchvision.models",),
            module=f"{_PKG}.resnet50_cifar10",
            description="CIFAR-10 / ResNet-50 (torchvision, random init), momentum SGD",
            seed_source=(
                "Malta 2021 §4.1 (ResNet-50, CIFAR-10 50,000/10,000, 10 "
                "classes, momentum SGD lr 0.1 -> 0.002, random init), Table 4.3 (batch 256 -> 17,000 "
                "iterations), Table 4.2 (measured runs)"
            ),
            data_kind="synthetic",
            data_description=(
                "synthetic CIFAR-10-shaped 3x32x32 images, 10 balanced classes (class colour pattern + "
                "Gaussian noise); generated lazily per index"
            ),
            default_batch_size=256,
            default_epochs=87,
            default_train_samples=50_000,
            default_val_samples=10_000,
            hyperparameters={
                "optimizer": "SGD",
                "momentum": 0.9,
                "lr": 0.1,
                "lr_final": 0.002,
                "lr_schedule": "linear per epoch (Malta: 'gradually decreased')",
                "loss": "cross-entropy",
                "architecture": "torchvision resnet50(num_classes=10, weights=None)",
                "input_shape": (3, 32, 32),
                "num_classes": 10,
                "batch_sizes_studied": (256, 512, 1024, 2048),
                "iterations_by_batch": {256: 17_000, 512: 8_000, 1024: 4_500, 2048: 3_000},
                "seed_inconsistencies": (
                    "Table 4.3 prints 2.7/5.6/10/15 'epochs' next to 17,000/8,000/4,500/3,000 iterations "
                    "(= 87/82/92/123 epochs at 196/98/49/25 it/epoch); default_epochs uses the iteration "
                    "count. §4.1 says CIFAR-10 images are 28x28; they are 32x32."
                ),
            },
        ),
        WorkloadSpec(
            name="inceptionv3_dr",
            requires=("torchvision.models",),
            module=f"{_PKG}.inceptionv3_dr",
            description="IC-DR: InceptionV3 diabetic-retinopathy grading (5 classes, 256x256), Adam",
            seed_source=(
                "Künas 2023 (thesis) §4.3 and §4.3.1 (EyePACS 256x256, 5 classes, "
                "InceptionV3 + GAP + Dense1024 ReLU + Dense5, Adam lr 0.0014), §6.2.3 (28,000 train / "
                "7,126 validation, batch 32, 25 epochs); Künas et al. 2023 §4 and §5.2"
            ),
            data_kind="synthetic",
            data_description=(
                "synthetic EyePACS-shaped fundus-like 3x256x256 images, 5 grades drawn with the EyePACS "
                "class frequencies; generated lazily per index"
            ),
            default_batch_size=32,
            default_epochs=25,
            default_train_samples=28_000,
            default_val_samples=7_126,
            hyperparameters={
                "optimizer": "Adam",
                "lr": 0.0014,
                "eps": 1e-7,
                "loss": "sparse categorical cross-entropy",
                "architecture": "torchvision inception_v3(weights=None, aux_logits=False, init_weights=True), "
                "fc -> Linear(2048,1024) ReLU Linear(1024,5)",
                "input_shape": (3, 256, 256),
                "num_classes": 5,
                "class_counts": (25_810, 2_443, 5_292, 873, 708),
                "tpu_global_batch": 256,
                "deviation": "Künas starts from ImageNet weights (transfer learning); here random init, "
                "same per-iteration compute",
            },
        ),
        WorkloadSpec(
            name="nn_twins_mlp",
            requires=("sklearn.preprocessing",),
            module=f"{_PKG}.nn_twins_mlp",
            description="NN-TWINS: I/O access-pattern MLP (5-5-5-3), RMSProp",
            seed_source=(
                "Künas 2023 (thesis) §4.1 (5 metrics, 3 classes, ~39,000 rows), "
                "§4.1.1 (architecture, Yeo-Johnson, RMSProp lr 0.001 momentum 0.9, categorical "
                "cross-entropy), §6.2.1 (27,238 train / 11,674 test, batch 32, 50 epochs)"
            ),
            data_kind="synthetic",
            data_description=(
                "synthetic TWINS-shaped table: 5 access-pattern metrics, 3 classes, Yeo-Johnson + "
                "standardised; generated once into tensors"
            ),
            default_batch_size=32,
            default_epochs=50,
            default_train_samples=27_238,
            default_val_samples=11_674,
            hyperparameters={
                "optimizer": "RMSprop",
                "lr": 0.001,
                "momentum": 0.9,
                "rho": 0.9,
                "eps": 1e-7,
                "loss": "categorical cross-entropy",
                "architecture": "Dense5 ReLU, Dense5 ReLU, Dense3 softmax; N(0, 0.05) init",
                "num_features": 5,
                "num_classes": 3,
                "preprocessing": "Yeo-Johnson power transform + standardisation",
                "tpu_global_batch": 256,
            },
        ),
        WorkloadSpec(
            name="rnn_sa_lstm",
            module=f"{_PKG}.rnn_sa_lstm",
            description="RNN-SA: LSTM sentiment analysis (embedding 128, LSTM 128, dense 128-64-1)",
            seed_source=(
                "Künas 2023 (thesis) §4.2 (IMDb, 300-word sequences), §4.2.1 "
                "(vocabulary 20,000, embedding 128, LSTM 128, dropout 0.2, dense 128/64/sigmoid), "
                "§6.2.2 (36,000 train / 10,000 validation / 4,000 test, batch 1024, 5 epochs)"
            ),
            data_kind="synthetic",
            data_description=(
                "synthetic IMDb-shaped reviews: 300-token pre-padded sequences over a 20,000-word "
                "vocabulary, binary sentiment; generated once into int32 tensors"
            ),
            default_batch_size=1024,
            default_epochs=5,
            default_train_samples=36_000,
            default_val_samples=10_000,
            hyperparameters={
                "optimizer": "Adam (assumed: the seed does not state it)",
                "lr": 0.001,
                "eps": 1e-7,
                "loss": "binary cross-entropy",
                "vocab_size": 20_000,
                "seq_len": 300,
                "embedding_dim": 128,
                "lstm_units": 128,
                "dropout": 0.2,
                "dense": (128, 64, 1),
                "num_classes": 2,
            },
        ),
    )
}

DEFAULT_WORKLOAD = "mnist_cnn"

# measured_cpu_iteration_s: {workload: {batch_size: seconds per training iteration}}, measured with
# ``python -m trainwise.workloads.measure`` on the 2-core development CPU (no GPU), torch 2.14.1 with its
# default 2 threads, num_workers=0; the median of 3-300 timed iterations after 1-20 warm-up ones; two
# sessions agreed within the ranges given in MEASURED_CPU_NOTES. Keys: the seed default batch and half.
MEASURED_CPU_ITERATION_S: dict[str, dict[int, float]] = {
    "mnist_cnn": {256: 0.41, 128: 0.18},
    "seismic_fcn": {256: 1.30, 128: 0.65},
    "resnet50_cifar10": {256: 2.97, 128: 1.57},
    "inceptionv3_dr": {32: 11.5, 16: 5.1},
    "nn_twins_mlp": {32: 0.0015, 16: 0.0014},
    "rnn_sa_lstm": {1024: 5.0, 512: 2.35},
}

# What the measurements mean for a CPU run at the seed's full size, and how to size a 3-10 minute one.
MEASURED_CPU_NOTES: dict[str, str] = {
    "mnist_cnn": (
        "range 0.41-0.47 s (256), 0.18-0.19 s (128). Seed size: 196 it/epoch ~ 80 s + validation of "
        "10,000 ~ 10 s per epoch, 15 epochs ~ 22 min. 3-10 min: e.g. --epochs 5, or --train-samples 12800."
    ),
    "seismic_fcn": (
        "range 1.30-1.68 s (256), 0.62-0.68 s (128). Seed size: 159 it/epoch ~ 3.5 min per epoch, "
        "13 epochs ~ 45 min. 3-10 min: e.g. --epochs 2, or --train-samples 10240 --epochs 4."
    ),
    "resnet50_cifar10": (
        "range 2.89-2.97 s (256), 1.53-1.57 s (128). Seed size is impractical on CPU: 196 it/epoch "
        "~ 10 min per epoch, 87 epochs ~ 14 h. 3-10 min: e.g. --train-samples 5120 --val-samples 1024 "
        "--epochs 3 (20 it/epoch)."
    ),
    "inceptionv3_dr": (
        "range 11.5-11.8 s (32), 4.7-5.1 s (16). Seed size is impractical on CPU: 875 it/epoch ~ 2.8 h "
        "per epoch, 25 epochs ~ 70 h. 3-10 min: e.g. --batch-size 16 --train-samples 320 "
        "--val-samples 64 --epochs 2 (20 it/epoch), or --batch-size 8."
    ),
    "nn_twins_mlp": (
        "range 0.0015-0.0017 s (32), 0.0009-0.0014 s (16): a 78-parameter model, so per-iteration "
        "Python/DataLoader overhead dominates and halving the batch barely changes the time. Seed size: "
        "852 it/epoch ~ 1.5 s + validation, 50 epochs ~ 1.5-2 min. 3-10 min: e.g. --epochs 200."
    ),
    "rnn_sa_lstm": (
        "range 5.0-7.9 s (1024), 2.35-2.56 s (512). Seed size: 36 it/epoch ~ 3 min + validation of "
        "10,000 ~ 20 s per epoch, 5 epochs ~ 17 min. 3-10 min: e.g. --epochs 2, or --train-samples 12288."
    ),
}

MEASURED_CPU_NOTES["resnet50_imagenet"] = (
    "not timed at full size on the development CPU (a batch-256 step at 224x224 takes on the order of a minute "
    "there): `trainwise plan` profiles it on a slice (batch 3) and plans the full-size step with the device model."
)

# command_for() keyword -> command-line option.
_OPTIONS = {
    "batch_size": "--batch-size",
    "epochs": "--epochs",
    "train_samples": "--train-samples",
    "val_samples": "--val-samples",
    "lr": "--lr",
    "num_workers": "--num-workers",
    "threads": "--threads",
    "seed": "--seed",
    "device": "--device",
}
_EXTRA_OPTIONS = {"mnist_cnn": {"mnist_dir": "--mnist-dir"}}


def workload_names() -> list[str]:
    return list(WORKLOADS)


def get_workload(name: str) -> WorkloadSpec:
    """The spec of ``name``; a ValueError lists the valid names and suggests the nearest one."""
    try:
        return WORKLOADS[name]
    except (KeyError, TypeError):
        pass
    valid = ", ".join(WORKLOADS)
    close = difflib.get_close_matches(str(name), list(WORKLOADS), n=1, cutoff=0.5)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown workload {name!r}.{hint} Valid workloads: {valid}.")


def check_requirements(name: str) -> None:
    """The optional modules workload `name` imports are installed, or one line naming the extra: before its
    process starts, not as a traceback inside the profiled job."""
    spec = get_workload(name)
    for module in spec.requires:
        if importlib.util.find_spec(module.split(".", 1)[0]) is None:
            raise missing_extra(module, f"the {spec.name} workload")


def command_for(name: str, **overrides: Any) -> list[str]:
    """The command line that runs workload ``name`` with the current interpreter.

    Always passes --batch-size, --epochs, --train-samples and --val-samples (seed defaults unless
    overridden); any other option (lr, num_workers, threads, seed, device; mnist_dir for mnist_cnn) is
    passed only when given and not None. Unknown keywords raise ValueError.
    """
    spec = get_workload(name)
    options = {**_OPTIONS, **_EXTRA_OPTIONS.get(spec.name, {})}
    unknown = sorted(set(overrides) - set(options))
    if unknown:
        raise ValueError(
            f"unknown option(s) for workload {spec.name!r}: {', '.join(unknown)}; "
            f"valid: {', '.join(options)}"
        )
    values: dict[str, Any] = {
        "batch_size": spec.default_batch_size,
        "epochs": spec.default_epochs,
        "train_samples": spec.default_train_samples,
        "val_samples": spec.default_val_samples,
    }
    for key, value in overrides.items():
        if value is not None:
            values[key] = value
        elif key in values:
            raise ValueError(f"{key} cannot be None")
    check_requirements(spec.name)
    cmd = [sys.executable, "-m", spec.module]
    for key, option in options.items():
        if key in values:
            cmd += [option, str(values[key])]
    return cmd
