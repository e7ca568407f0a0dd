"""Named models characterised by name: torchvision builders, Hugging Face configs (`hf:`) and
trainwise's reference workloads, each built on the meta device and traced by trainwise.agent.trace,
with a disk cache of the results (`characterise_named`); `named_step` describes the same training
step for measuring it on a real device (trainwise.predict.measure).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainwise._io import cache_root
from trainwise.agent.trace.characterisation import characterise_model
from trainwise.agent.trace.step import default_loss, normalise_precision
from trainwise.core.workload import WorkloadCharacterisation
from trainwise.errors import TrainwiseError

# Input resolution of torchvision builders that do not train at 224x224 by default.
_TORCHVISION_SIZES = {"inception_v3": 299, "efficientnet_b1": 240, "efficientnet_b2": 260, "efficientnet_b3": 300,
                      "efficientnet_b4": 380, "efficientnet_b5": 456, "efficientnet_b6": 528, "efficientnet_b7": 600,
                      "efficientnet_v2_s": 384, "efficientnet_v2_m": 480, "efficientnet_v2_l": 480}

# Reference workloads: input spec per sample (shape, dtype, "index", high) and optimizer (the seeds').
_WORKLOAD_INPUTS: dict[str, tuple[tuple[int, ...], str, int]] = {
    "mnist_cnn": ((1, 28, 28), "float32", 0),
    "seismic_fcn": ((1, 64, 64), "float32", 0),
    "resnet50_cifar10": ((3, 32, 32), "float32", 0),
    "inceptionv3_dr": ((3, 256, 256), "float32", 0),
    "nn_twins_mlp": ((5,), "float32", 0),
    "rnn_sa_lstm": ((300,), "int64", 20_000),
}
_WORKLOAD_OPTIMIZERS = {"mnist_cnn": "adadelta", "seismic_fcn": "sgd_momentum", "resnet50_cifar10": "sgd_momentum",
                        "inceptionv3_dr": "adam", "nn_twins_mlp": "rmsprop_momentum", "rnn_sa_lstm": "adam"}


# Published benchmark models that torchvision has no builder name for, built from its classes.
_EXTRA_BUILDERS: dict[str, Callable[[], Any]] = {}


def _resnext101_32x4d() -> Any:
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4)


_EXTRA_BUILDERS["resnext101_32x4d"] = _resnext101_32x4d  # NVIDIA DeepLearningExamples' ResNeXt101-32x4d


def _ncf() -> Any:
    """NVIDIA DeepLearningExamples' NCF (NeuMF) on MovieLens-20m: 138,493 users, 26,744 items,
    GMF factors 64, MLP layers 256-256-128-64 (DLE defaults: --factors 64 --layers 256 256 128 64)."""
    import torch
    from torch import nn

    class NeuMF(nn.Module):
        def __init__(self, users: int = 138_493, items: int = 26_744, factors: int = 64,
                     layers: tuple[int, ...] = (256, 256, 128, 64)) -> None:
            super().__init__()
            self.mf_user, self.mf_item = nn.Embedding(users, factors), nn.Embedding(items, factors)
            self.mlp_user, self.mlp_item = nn.Embedding(users, layers[0] // 2), nn.Embedding(items, layers[0] // 2)
            self.mlp = nn.Sequential(*[m for a, b in zip(layers, layers[1:]) for m in (nn.Linear(a, b), nn.ReLU())])
            self.final = nn.Linear(factors + layers[-1], 1)

        def forward(self, user: Any, item: Any) -> Any:
            mf = self.mf_user(user) * self.mf_item(item)
            mlp = self.mlp(torch.cat([self.mlp_user(user), self.mlp_item(item)], dim=1))
            return self.final(torch.cat([mf, mlp], dim=1)).squeeze(-1)

    return NeuMF()


def _bce_loss(out: Any) -> Any:
    import torch.nn.functional as F

    return F.binary_cross_entropy_with_logits(out, out.detach())


# Non-image models: name -> (builder, inputs(batch), loss, default optimizer)
_EXTRA_MODELS: dict[str, tuple[Callable[[], Any], Callable[[int], Any], Callable[[Any], Any] | None, str]] = {
    "ncf": (_ncf, lambda b: (((b,), "int64", "index", 26_744), ((b,), "int64", "index", 26_744)), _bce_loss, "adam"),
}


def _build_torchvision(name: str) -> Any:
    import torchvision

    if name in _EXTRA_BUILDERS:
        return _EXTRA_BUILDERS[name]()
    available = set(torchvision.models.list_models(module=torchvision.models))
    if name not in available:
        return None
    kwargs: dict[str, Any] = {"weights": None}
    if name == "inception_v3":
        kwargs.update(aux_logits=True, init_weights=False)
    if name == "googlenet":
        kwargs.update(aux_logits=False, init_weights=False)
    return torchvision.models.get_model(name, **kwargs)


def model_kinds() -> dict[str, str]:
    """Names `characterise_named` understands, by kind (for error messages and `--help`)."""
    from trainwise.predict import hf_models
    from trainwise.workloads import workload_names

    return {"workload": ", ".join(workload_names()), "hf": ", ".join(f"hf:{n}" for n in hf_models.config_names()),
            "torchvision": "any torchvision.models builder name (resnet50, convnext_large, inception_v3, vit_b_16, ...)"}


MEMORY_FORMATS = {"nchw": "nchw", "channels_first": "nchw", "contiguous": "nchw", "nhwc": "nhwc", "channels_last": "nhwc"}


def normalise_memory_format(value: str) -> str:
    """"nchw" or "nhwc" from any of MEMORY_FORMATS' spellings (any case)."""
    layout = MEMORY_FORMATS.get(str(value).strip().lower())
    if layout is None:
        raise TrainwiseError(f"unknown memory format {value!r} (--memory-format): use nchw or nhwc (channels_last)")
    return layout


def characterise_named(model_name: str, per_device_batch: int, precision: str = "fp32", seq_len: int | None = None,
                       *, image_size: int | None = None, optimizer: str | None = None, task: str | None = None,
                       num_classes: int | None = None, memory_format: str = "nchw") -> WorkloadCharacterisation:
    """Build `model_name` directly on the meta device and characterise one training step.

    `model_name` is a torchvision builder (`resnet50`, `convnext_large`), a Hugging Face config
    prefixed `hf:` (`hf:roberta-base`, from the configs packaged in trainwise/predict/data/hf_configs,
    or a path to a config.json after `hf:`), or a trainwise reference workload (`resnet50_cifar10`).
    """
    layout = normalise_memory_format(memory_format)
    check_step_options(seq_len, image_size, task)
    args = (str(model_name).strip(), int(per_device_batch), normalise_precision(precision), seq_len, image_size,
            optimizer, task, num_classes, layout)
    path = _disk_cache_path(args)
    if path is not None and path.is_file():
        try:
            return WorkloadCharacterisation.model_validate_json(path.read_text(encoding="utf-8"))
        except Exception:  # a stale or truncated cache entry is simply rebuilt
            pass
    char = _characterise_named_cached(*args)
    if path is not None:
        try:
            char.save(path)
        except OSError:
            pass
    return char


def _disk_cache_path(args: tuple) -> Path | None:
    """Cache of named characterisations (they are deterministic for a torch/trainwise version).

    $TRAINWISE_CACHE_DIR or ~/.cache/trainwise; TRAINWISE_NO_CACHE=1 disables it.
    """
    import hashlib

    root = cache_root()
    if root is None:
        return None
    if str(args[0]).startswith("hf:") and str(args[0]).endswith(".json"):
        return None  # a user config file may change under the same name
    try:
        import torch

        from trainwise import __version__
    except Exception:  # pragma: no cover
        return None
    root = root / "characterisations"
    key = json.dumps([list(map(str, args)), torch.__version__, __version__, _tracer_digest()])
    return root / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


@lru_cache(maxsize=1)
def _tracer_digest() -> str:
    """A digest of the tracer's and the model builders' source, so any change to how a step is traced
    or built invalidates the cache."""
    import hashlib

    from trainwise.agent import trace
    from trainwise.predict import hf_models

    digest = hashlib.sha256()
    tracer_files = sorted(Path(trace.__file__).parent.glob("*.py"))
    for module_file in (*tracer_files, __file__, hf_models.__file__):
        try:
            digest.update(Path(module_file).read_bytes())
        except OSError:
            digest.update(str(module_file).encode())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=64)
def _characterise_named_cached(model_name: str, batch: int, precision: str, seq_len: int | None,
                               image_size: int | None, optimizer: str | None, task: str | None,
                               num_classes: int | None, memory_format: str = "nchw") -> WorkloadCharacterisation:
    char = _characterise_named_uncached(model_name, batch, precision, seq_len, image_size, optimizer, task, num_classes)
    return char.model_copy(update={"memory_format": memory_format}) if memory_format != char.memory_format else char


@dataclass(frozen=True)
class NamedStep:
    """One training step of a named model, described once for both tracing and measuring it.

    `build()` returns the nn.Module (call it under `torch.device("meta")` to allocate nothing),
    `inputs` is the per-device batch as `materialise_inputs` specs, `loss` maps the output to a
    scalar (None: `default_loss`), `optimizer` is an OPTIMIZER_STATE key. The characteriser traces
    exactly this step on meta; `trainwise.predict.measure` runs exactly this step on a real device.
    """

    model_name: str
    per_device_batch: int
    build: Callable[[], Any]
    inputs: Any
    loss: Callable[[Any], Any] | None
    optimizer: str
    seq_len: int | None = None
    image_size: int | None = None


def check_step_options(seq_len: int | None, image_size: int | None, task: str | None) -> None:
    """Refuse a sequence length, image size or hf: head that no step can have (before a cache lookup
    or a trace): `seq_len or 512` would take 0 for "not given", a negative size fails deep in torch."""
    for value, what in ((seq_len, "sequence length (--seq-len)"), (image_size, "image size (--image-size)")):
        if value is not None and value < 1:
            raise TrainwiseError(f"the {what} must be a positive whole number (got {value})")
    if task is not None:
        from trainwise.predict import hf_models

        hf_models.task_of({}, task)


def named_step(model_name: str, batch: int, seq_len: int | None = None, image_size: int | None = None,
               optimizer: str | None = None, task: str | None = None) -> NamedStep:
    """The training step of a torchvision builder, an hf: config or a trainwise reference workload."""
    if batch <= 0:
        raise TrainwiseError(f"per-device batch must be positive (got {batch})")
    check_step_options(seq_len, image_size, task)
    if model_name.startswith("hf:"):
        from trainwise.predict import hf_models

        config = hf_models.load_config(model_name[3:])
        head = hf_models.task_of(config, task)
        # 512 unless the model has fewer positions (a user config.json); a given length must fit them:
        # the one check that predicting, characterising, measuring and calibrating all pass through
        seq = int(seq_len or min(512, hf_models.max_seq_len(config) or 512))
        hf_models.check_seq_len(model_name, config, seq)
        inputs = ((batch, seq), "int64", "index", int(config.get("vocab_size", 30522)))
        return NamedStep(model_name, batch, lambda: hf_models.build(config, task=head), inputs,
                         hf_models.loss_for(head), optimizer or "adamw", seq_len=seq)
    from trainwise.workloads import WORKLOADS

    if model_name in _EXTRA_MODELS:
        builder, inputs_of, loss, default_opt = _EXTRA_MODELS[model_name]
        return NamedStep(model_name, batch, builder, inputs_of(batch), loss, optimizer or default_opt)
    if model_name in WORKLOADS:
        spec = WORKLOADS[model_name]
        shape, dtype, high = _WORKLOAD_INPUTS.get(model_name, (tuple(spec.hyperparameters.get("input_shape", ())), "float32", 0))
        if not shape:
            raise TrainwiseError(f"workload {model_name} does not declare its input shape")
        return NamedStep(model_name, batch, lambda: importlib.import_module(spec.module).build_model(),
                         ((batch, *shape), dtype, "index", high), _workload_loss(model_name),
                         optimizer or _WORKLOAD_OPTIMIZERS.get(model_name, "sgd_momentum"),
                         image_size=shape[-1] if len(shape) == 3 else None)
    from trainwise.optional import require

    torchvision = require("torchvision", f"characterising {model_name} (a torchvision model)")

    if model_name not in _EXTRA_BUILDERS and model_name not in torchvision.models.list_models(module=torchvision.models):
        import difflib

        from trainwise.predict import hf_models
        from trainwise.workloads import workload_names

        candidates = list(torchvision.models.list_models(module=torchvision.models)) + list(_EXTRA_BUILDERS) + list(_EXTRA_MODELS) + workload_names() + [
            f"hf:{n}" for n in hf_models.config_names()]
        near = difflib.get_close_matches(model_name, candidates, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(near)}?" if near else "use a torchvision builder name, hf:<config> or a trainwise workload"
        raise TrainwiseError(f"unknown model {model_name!r}: {hint}")
    size = int(image_size or _TORCHVISION_SIZES.get(model_name, 224))
    loss = _inception_loss if model_name == "inception_v3" else None
    return NamedStep(model_name, batch, lambda: _build_torchvision(model_name), ((batch, 3, size, size), "float32"), loss,
                     optimizer or "sgd_momentum", image_size=size)


def _characterise_named_uncached(model_name: str, batch: int, precision: str, seq_len: int | None,
                                 image_size: int | None, optimizer: str | None, task: str | None,
                                 num_classes: int | None) -> WorkloadCharacterisation:
    import torch

    step = named_step(model_name, batch, seq_len, image_size, optimizer, task)
    with torch.device("meta"):
        try:
            model = step.build()
        except TrainwiseError:
            raise
        except Exception as exc:
            raise TrainwiseError(f"building model {model_name!r} failed: {exc}") from None
    return characterise_model(model, step.inputs, step.loss, step.optimizer, precision, model_name=model_name,
                              per_device_batch=batch, seq_len=step.seq_len, image_size=step.image_size, copy_model=False)


def _inception_loss(output: Any) -> Any:
    logits = output[0] if isinstance(output, (tuple, list)) else getattr(output, "logits", output)
    aux = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else getattr(output, "aux_logits", None)
    loss = default_loss(logits)
    if aux is not None:
        loss = loss + 0.4 * default_loss(aux)
    return loss


def _workload_loss(name: str) -> Callable[[Any], Any] | None:
    import torch.nn.functional as F

    if name == "rnn_sa_lstm":
        return lambda out: F.binary_cross_entropy_with_logits(out, out.detach())
    if name == "seismic_fcn":
        def seg_loss(out: Any) -> Any:
            import torch

            target = torch.empty((out.shape[0], *out.shape[2:]), dtype=torch.long, device=out.device)
            if target.device.type != "meta":
                target.zero_()  # a real step (trainwise.predict.measure) needs valid class indices
            return F.cross_entropy(out, target)
        return seg_loss
    return None


def characterisation_to_json(char: WorkloadCharacterisation) -> str:
    return json.dumps(char.model_dump(mode="json"))
