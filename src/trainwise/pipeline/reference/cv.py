"""CV reference pipeline (PRESTO's CV): JPEG/PNG files → decode → resize → pixel-centre float32 → random crop.

The generator writes real encoded images (PIL's JPEG and PNG encoders) at several resolutions, with
smooth structure plus sensor-like noise so the codecs do real work (pure noise would not compress,
flat colour would be trivially small).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from trainwise.pipeline.spec import FileSource, Pipeline, Sample, Step

RESOLUTIONS = ((320, 240), (500, 375), (640, 480), (800, 600))
RESIZE = 256
CROP = 224
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


def _image(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = []
    for _ in range(3):
        fx, fy = rng.uniform(0.002, 0.03, size=2)
        phase = rng.uniform(0, 2 * np.pi)
        base = 128 + 60 * np.sin(fx * x + phase) * np.cos(fy * y) + rng.uniform(-40, 40) * (x / width)
        channels.append(base)
    image = np.stack(channels, axis=-1)
    for _ in range(int(rng.integers(2, 6))):  # a few solid shapes (edges for the codec)
        cx, cy, r = rng.integers(0, width), rng.integers(0, height), rng.integers(10, max(11, height // 4))
        mask = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        image[mask] = rng.uniform(0, 255, size=3)
    image += rng.normal(0, 4, size=image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def generate(directory: str | Path, count: int, seed: int = 0, png_fraction: float = 0.3) -> list[Path]:
    from PIL import Image

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        width, height = RESOLUTIONS[int(rng.integers(len(RESOLUTIONS)))]
        image = Image.fromarray(_image(rng, width, height))
        path = root / (f"img{i:06d}.png" if rng.random() < png_fraction else f"img{i:06d}.jpg")
        if path.suffix == ".png":
            image.save(path, format="PNG", compress_level=6)
        else:
            image.save(path, format="JPEG", quality=90)
        paths.append(path)
    return paths


def decode(sample: Sample) -> Sample:
    from PIL import Image

    with Image.open(io.BytesIO(sample["data"])) as image:
        array = np.asarray(image.convert("RGB"))
    return {"__key__": sample["__key__"], "image": array}


def resize(sample: Sample) -> Sample:
    from PIL import Image

    image = Image.fromarray(sample["image"]).resize((RESIZE, RESIZE), Image.BILINEAR)
    return {"__key__": sample["__key__"], "image": np.asarray(image)}


def pixel_centre(sample: Sample) -> Sample:
    chw = sample["image"].transpose(2, 0, 1).astype(np.float32) / 255.0
    return {"__key__": sample["__key__"], "image": (chw - MEAN) / STD}


def random_crop(sample: Sample) -> Sample:
    image = sample["image"]
    rng = np.random.default_rng()
    if image.ndim == 3 and image.shape[0] == 3:  # CHW float
        top, left = rng.integers(0, image.shape[1] - CROP + 1), rng.integers(0, image.shape[2] - CROP + 1)
        return {"__key__": sample["__key__"], "image": np.ascontiguousarray(image[:, top:top + CROP, left:left + CROP])}
    top, left = rng.integers(0, image.shape[0] - CROP + 1), rng.integers(0, image.shape[1] - CROP + 1)
    return {"__key__": sample["__key__"], "image": np.ascontiguousarray(image[top:top + CROP, left:left + CROP])}


STEPS = (Step("decode", decode), Step("resize", resize), Step("pixel_centre", pixel_centre),
         Step("random_crop", random_crop, deterministic=False))


def pipeline(directory: str | Path) -> Pipeline:
    return Pipeline("cv", FileSource.from_directory(directory), list(STEPS),
                    description="JPEG/PNG → decode → resize 256 → pixel-centre float32 → random crop 224 (online)")
