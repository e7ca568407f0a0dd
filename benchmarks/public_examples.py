"""Training scripts nobody here wrote: the PyTorch examples repository's, profiled unmodified, then run for real.

Needs a checkout of github.com/pytorch/examples (`--examples DIR`; nothing of it is copied into trainwise).
The scripts that train offline on a CPU in minutes:
- `word_language_model/main.py`: an LSTM language model updated by hand (no torch.optim, no DataLoader),
  validation by model.eval() + no_grad, the whole model pickled with torch.save after an improving epoch;
- `dcgan/main.py --dataset fake`: two models, two Adam optimizers, a DataLoader with two workers, images and
  both models saved every epoch, the epoch count in --niter;
- `mnist/main.py --epochs 3`: the CNN of the PyTorch tutorials, Adadelta with a StepLR schedule, a test pass
  under no_grad after every epoch; this machine cannot download MNIST, so it runs beside MNIST-format files of
  synthetic digits (same shapes, same step);
- `mnist_hogwild/main.py --epochs 2`: Hogwild training, two processes the script spawns (torch.multiprocessing)
  updating one shared model, each over its own DataLoader, then a test pass in the parent;
- `mnist_forward_forward/main.py --epochs 300 --train_size 5000`: Hinton's forward-forward, one batch drawn once,
  two layers trained one after the other, each by its own Adam for --epochs steps (the flag counts steps per
  layer); both on synthetic digits like mnist;
- `vae/main.py --epochs 10`, `mnist_rnn/main.py --epochs 14` (an LSTM over the digit's rows) and
  `siamese_network/main.py --epochs 1` (a ResNet-18 twin over random pairs; one epoch takes minutes): DataLoader
  loops with a test pass after every epoch, on synthetic digits;
- `gat/main.py` (a graph attention network on Cora, 300 full-batch epochs: an epoch is one step of seconds, each
  followed by two no_grad passes), beside synthetic files of Cora's format and sizes (it cannot be downloaded here).
With `--nanogpt DIR` (a checkout of github.com/karpathy/nanoGPT), also its `train.py` as its README runs it on a
CPU (`config/train_shakespeare_char.py --device=cpu --compile=False ... --max_iters=2000`): settings as
module-level globals set by its configurator, batches drawn from a memory map (no DataLoader), the loss estimated
every 250 iterations, a checkpoint when it improves, the run bound by `max_iters`, not epochs; the scripts and
config are copied to a scratch folder beside synthetic characters in shakespeare_char's format (vocabulary 65);
and `nanogpt_compiled`, the same command with `--compile=True` (its default: the compiled model must hold nothing of
trainwise's hooks).
With `--mingpt DIR` (a checkout of github.com/karpathy/minGPT), also `projects/chargpt/chargpt.py` (gpt-micro,
batch 32, `--trainer.max_iters=1500`): its Trainer draws batches from a DataLoader over an endless sampler (10^10
samples: an "epoch" of 312 million steps), the step budget is `config.trainer.max_iters`, and every 500 steps it
samples 500 characters under no_grad and saves the model; run from a copy beside the `mingpt` package (its README
installs it with `pip install -e .`), with random characters in place of tiny Shakespeare.
With `--xtransformers DIR` (a checkout of github.com/lucidrains/x-transformers, its dependencies einops, einx, loguru,
fire, wandb and accelerate importable), also `train_enwik8.py` (`--num_batches 100 --seq_len 128 --cpu True`): batches
drawn with next() from endless cycle()s over DataLoaders inside `for i in tqdm.tqdm(range(num_batches))`, four
micro-batches a step, one validation batch every 10 steps, a 64-character sample every 50; from a copy beside its
`x_transformers` package, with random letters in place of enwik8.
(time_sequence_prediction's LBFGS takes minutes per step on a 2-core CPU and its torch.load needs
weights_only=False on torch >= 2.6; vae and the others download their data.)
For each: `trainwise profile` with the defaults (the epoch count read from the script's flag), the same-machine
prediction of the whole run, then the plain run (`python main.py ARGS` in the script's folder, no trainwise),
whose launch → exit wall time is the truth. Nothing is fitted to these runs.

Writes benchmarks/results/public_examples.json; `summary`: profiled_fraction, median_abs_error, max_abs_error,
profiling_cost_fraction (median).
Run: .venv/bin/python benchmarks/public_examples.py --examples PATH/TO/examples [--nanogpt PATH/TO/nanoGPT]
[--mingpt PATH/TO/minGPT] [--xtransformers PATH/TO/x-transformers] [--size 1.0]
[--only NAME ...]
On a GPU, `--accel` runs each script there as its README does (nanoGPT: its GPU command, torch.compile on; the
results of a lent H200: results/public_examples_h200.json), and `--no-cuda-sync` profiles without the wait for the
GPU at each step's end (a diagnostic; benchmarks/lent_host.sh runs nanoGPT both ways).
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from trainwise._io import atomic_write_text
from trainwise.profile.runner import ProfileOptions
from _machine import git_commit, machine
from client_scripts import accuracy_summary, print_row, profile_then_run

RESULTS = Path(__file__).parent / "results"


def word_language_model(folder: Path, size: float, scratch: str) -> list[str]:
    # a small LSTM (64 units) so that an epoch of wikitext-2 takes minutes on a CPU, not an hour
    return ["main.py", "--epochs", str(max(1, round(2 * size))), "--emsize", "64", "--nhid", "64",
            "--data", str(folder / "data" / "wikitext-2"), "--save", str(Path(scratch) / "model.pt")]


def dcgan(folder: Path, size: float, scratch: str) -> list[str]:
    return ["main.py", "--dataset", "fake", "--niter", str(max(1, round(8 * size))), "--outf", scratch,
            "--manualSeed", "1"]


def mnist(folder: Path, size: float, scratch: str) -> list[str]:
    # The script reads ../data/MNIST and this machine cannot download it: it runs from a copy of its folder in
    # the scratch directory beside MNIST-format files of synthetic digits (the checkout stays untouched)
    on_mnist("mnist", folder, scratch)
    return ["main.py", "--epochs", str(max(1, round(3 * size)))]


def mnist_hogwild(folder: Path, size: float, scratch: str) -> list[str]:
    # Hogwild: the parent shares one model's memory with two processes it spawns (torch.multiprocessing), each
    # training every epoch over its own DataLoader; the parent then tests. Reads ../data/MNIST, as mnist does.
    on_mnist("mnist_hogwild", folder, scratch, files=("main.py", "train.py"))
    return ["main.py", "--epochs", str(max(1, round(2 * size))), "--num-processes", "2"]


def mnist_forward_forward(folder: Path, size: float, scratch: str) -> list[str]:
    # Hinton's forward-forward: one batch drawn once, each layer (an nn.Linear with its own Adam, kept in a plain
    # list, so the net registers no parameters) trained alone for --epochs steps, one after the other; the script's
    # own `train(x_pos, x_neg)` overrides nn.Module.train. Reads ./data/MNIST.
    write_mnist_like(copied_to_scratch("mnist_forward_forward", folder, scratch) / "data" / "MNIST" / "raw")
    return ["main.py", "--epochs", str(max(10, round(300 * size))), "--train_size", "5000", "--test_size", "2000",
            "--log-interval", "100"]


def copied_to_scratch(name: str, folder: Path, scratch: str, files: tuple[str, ...] = ("main.py",)) -> Path:
    """The example's `files` copied to a folder of its name in the scratch directory (the checkout stays untouched)."""
    run_dir = Path(scratch) / name
    run_dir.mkdir()
    for file in files:
        shutil.copy(folder / file, run_dir / file)
    return run_dir


def on_mnist(name: str, folder: Path, scratch: str, files: tuple[str, ...] = ("main.py",)) -> Path:
    """The example copied to the scratch directory beside synthetic MNIST at ../data, where it reads MNIST."""
    run_dir = copied_to_scratch(name, folder, scratch, files)
    write_mnist_like(Path(scratch) / "data" / "MNIST" / "raw")
    return run_dir


def vae(folder: Path, size: float, scratch: str) -> list[str]:
    # Kingma and Welling's variational auto-encoder: a test pass under no_grad and two save_image calls into
    # ./results after every epoch
    (on_mnist("vae", folder, scratch) / "results").mkdir()
    return ["main.py", "--epochs", str(max(1, round(10 * size)))]


def mnist_rnn(folder: Path, size: float, scratch: str) -> list[str]:
    # an LSTM reading each digit row by row, Adadelta with a StepLR schedule, a test pass after every epoch
    on_mnist("mnist_rnn", folder, scratch)
    return ["main.py", "--epochs", str(max(1, round(14 * size)))]


def siamese_network(folder: Path, size: float, scratch: str) -> list[str]:
    # a ResNet-18 twin over pairs of digits drawn at random in the Dataset's __getitem__; an epoch of its 938
    # steps takes minutes on a CPU, so one epoch (the script's default is 14)
    on_mnist("siamese_network", folder, scratch)
    return ["main.py", "--epochs", str(max(1, round(1 * size)))]


def gat(folder: Path, size: float, scratch: str) -> list[str]:
    # Velickovic et al.'s graph attention network on Cora: full-batch, so an epoch is one step (and the script
    # evaluates the training and validation masks after each, two no_grad forward passes); its 300 epochs are
    # the paper's setting. This machine cannot download Cora: synthetic files of its format and sizes.
    write_cora_like(copied_to_scratch("gat", folder, scratch) / "cora")
    return ["main.py", "--epochs", str(max(1, round(300 * size)))]


def write_cora_like(folder: Path, seed: int = 0) -> None:
    """Cora's two files (2,708 papers, 1,433 binary word features, 7 classes; 5,429 citations), drawn at random:
    the step's time depends on the sizes (the adjacency is dense in this script), not on which words or links."""
    import numpy as np

    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    papers = rng.choice(10**6, 2708, replace=False)
    classes = ["Case_Based", "Genetic_Algorithms", "Neural_Networks", "Probabilistic_Methods",
               "Reinforcement_Learning", "Rule_Learning", "Theory"]
    words = (rng.random((2708, 1433)) < 0.0127).astype(int)  # Cora's ~18 words per paper
    lines = [f"{p}\t" + "\t".join(map(str, row)) + f"\t{classes[rng.integers(7)]}" for p, row in zip(papers, words)]
    (folder / "cora.content").write_text("\n".join(lines) + "\n", encoding="utf-8")
    links = [rng.choice(papers, 2, replace=False) for _ in range(5429)]
    (folder / "cora.cites").write_text("".join(f"{a}\t{b}\n" for a, b in links), encoding="utf-8")


def write_mnist_like(raw: Path, seed: int = 0) -> None:
    """MNIST's four idx files (60,000 + 10,000 28x28 images and labels): a bar whose position is the label, on
    noise. The step's time depends on the shapes, not the pixels."""
    import numpy as np

    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", 60_000), ("t10k", 10_000)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = (rng.random((n, 28, 28)) * 60).astype(np.uint8)
        for digit in range(10):
            images[labels == digit, 4 + 2 * digit: 10 + 2 * digit, 6:22] = 255
        (raw / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())


# tiny Shakespeare's 65 characters, which nanoGPT's and minGPT's character models train on
SHAKESPEARE_CHARACTERS = "\n !$&',-.3:;?" + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def nanogpt(folder: Path, size: float, scratch: str, compiled: bool = False) -> list[str]:
    # Runs from a copy (it writes out-shakespeare-char/ and reads data/shakespeare_char/ relative to its folder)
    run_dir = Path(scratch) / ("nanogpt_compiled" if compiled else "nanogpt")
    shutil.copytree(folder, run_dir, ignore=shutil.ignore_patterns(".git", "assets", "*.ipynb"))
    write_characters_like(run_dir / "data" / "shakespeare_char")
    iterations = max(250, round(2000 * size / 250) * 250)
    # its README's command for a CPU ("I only have a macbook"); nanogpt_compiled: the same with its default
    # torch.compile on (the agent's hooks must stay out of the compiled model)
    return ["train.py", "config/train_shakespeare_char.py", "--device=cpu", f"--compile={compiled}", "--eval_iters=20",
            "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128",
            f"--max_iters={iterations}", f"--lr_decay_iters={iterations}", "--dropout=0.0"]


def write_characters_like(folder: Path, seed: int = 0) -> None:
    """shakespeare_char's prepare.py output (train.bin, val.bin: uint16 token ids; meta.pkl: the vocabulary), its
    sizes and its 65 characters, the tokens drawn at random (the step's time depends on the shapes)."""
    import pickle

    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    chars = sorted(set(SHAKESPEARE_CHARACTERS))
    rng = np.random.default_rng(seed)
    for split, n in (("train", 1_003_854), ("val", 111_540)):
        rng.integers(0, len(chars), n).astype(np.uint16).tofile(folder / f"{split}.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    (folder / "meta.pkl").write_bytes(pickle.dumps(meta))


def mingpt(folder: Path, size: float, scratch: str) -> list[str]:
    run_dir = Path(scratch) / "mingpt"
    shutil.copytree(folder / "mingpt", run_dir / "mingpt")
    shutil.copy(folder / "projects" / "chargpt" / "chargpt.py", run_dir / "chargpt.py")
    import random

    generator = random.Random(0)
    (run_dir / "input.txt").write_text("".join(generator.choice(SHAKESPEARE_CHARACTERS) for _ in range(1_115_394)))
    return ["chargpt.py", f"--trainer.max_iters={max(100, round(1500 * size))}", "--model.model_type=gpt-micro",
            "--trainer.batch_size=32"]


def xtransformers_enwik8(folder: Path, size: float, scratch: str) -> list[str]:
    # lucidrains' loop: `for i in tqdm.tqdm(range(num_batches))` drawing batches with next() from endless cycle()s
    # over DataLoaders, four micro-batches a step, one validation batch every --validate_every steps and a sample
    # generated every --generate_every; runs from a copy beside its `x_transformers` package, on a CPU (`--cpu True`
    # for its accelerate.Accelerator), with sequences of 128 (its 1,024 take ~20 s a step on a 2-core CPU)
    run_dir = Path(scratch) / "xtransformers_enwik8"
    shutil.copytree(folder / "x_transformers", run_dir / "x_transformers")
    shutil.copy(folder / "train_enwik8.py", run_dir / "train_enwik8.py")
    write_enwik8_like(run_dir / "data" / "enwik8.gz")
    return ["train_enwik8.py", "--num_batches", str(max(20, round(100 * size))), "--seq_len", "128", "--cpu", "True",
            "--validate_every", "10", "--generate_every", "50", "--generate_length", "64"]


def write_enwik8_like(path: Path, seed: int = 0) -> None:
    """enwik8.gz's first 92 MB (the script reads 95e6 bytes and validates on those past 90e6), random lowercase letters
    (the step's time depends on the shapes, not the text)."""
    import gzip

    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    letters = np.random.default_rng(seed).integers(97, 123, size=92_000_000, dtype=np.uint8)
    with gzip.open(path, "wb", compresslevel=1) as file:
        file.write(letters.tobytes())


EXAMPLES = {"word_language_model": word_language_model, "dcgan": dcgan, "mnist": mnist, "nanogpt": nanogpt,
            "nanogpt_compiled": lambda folder, size, scratch: nanogpt(folder, size, scratch, compiled=True),
            "mingpt": mingpt, "mnist_hogwild": mnist_hogwild, "mnist_forward_forward": mnist_forward_forward,
            "vae": vae, "mnist_rnn": mnist_rnn, "siamese_network": siamese_network, "gat": gat,
            "xtransformers_enwik8": xtransformers_enwik8}
REQUIRED = {"word_language_model": ["main.py", "data/wikitext-2/train.txt", "data/wikitext-2/valid.txt",
                                    "data/wikitext-2/test.txt"], "dcgan": ["main.py"], "mnist": ["main.py"],
            "nanogpt": ["train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py"],
            "nanogpt_compiled": ["train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py"],
            "mingpt": ["mingpt/trainer.py", "mingpt/model.py", "projects/chargpt/chargpt.py"],
            "mnist_hogwild": ["main.py", "train.py"], "mnist_forward_forward": ["main.py"], "vae": ["main.py"],
            "mnist_rnn": ["main.py"], "siamese_network": ["main.py"], "gat": ["main.py"],
            "xtransformers_enwik8": ["train_enwik8.py", "x_transformers/x_transformers.py"]}
PYTORCH_EXAMPLES = ("word_language_model", "dcgan", "mnist", "mnist_hogwild", "mnist_forward_forward", "vae", "mnist_rnn",
                    "siamese_network", "gat")
# examples run from a copy of their folder in the scratch directory (they read data from a fixed relative path)
RUN_IN_SCRATCH = {"mnist", "nanogpt", "nanogpt_compiled", "mingpt", "mnist_hogwild", "mnist_forward_forward", "vae",
                  "mnist_rnn", "siamese_network", "gat", "xtransformers_enwik8"}
# the packages an example imports beyond torch and the benchmark's own environment
EXAMPLE_PACKAGES = {"xtransformers_enwik8": ("einops", "einx", "loguru", "fire", "wandb", "accelerate", "tqdm")}


# --accel: the flags that put a script on the machine's accelerator (mnist, vae, siamese_network and gat use one
# whenever torch.accelerator finds it)
ACCEL_FLAGS = {"dcgan": ["--accel"], "mnist_rnn": ["--accel"]}


def nanogpt_on_accelerator(size: float) -> list[str]:
    """nanoGPT's README command on a GPU (its shakespeare_char config: 6 layers of 384, blocks of 256, batches of 64,
    an estimate of the loss every 250 iterations, torch.compile on), its 5,000 iterations scaled by `size`."""
    iterations = max(250, round(5000 * size / 250) * 250)
    return ["train.py", "config/train_shakespeare_char.py", f"--max_iters={iterations}", f"--lr_decay_iters={iterations}"]


def measure(name: str, folder: Path, size: float, accel: bool = False, cuda_sync: bool = True) -> dict:
    with tempfile.TemporaryDirectory(prefix="trainwise-examples-") as scratch:
        args = EXAMPLES[name](folder, size, scratch)
        if accel:
            args = nanogpt_on_accelerator(size) if name.startswith("nanogpt") else [*args, *ACCEL_FLAGS.get(name, [])]
        argv = [sys.executable, *args]
        row: dict = {"example": name, "command": argv[1:], "accel": accel, "cuda_sync": cuda_sync,
                     "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        # the scripts read and write relative to their folder, as their READMEs run them
        cwd = Path(scratch) / name if name in RUN_IN_SCRATCH else folder
        return profile_then_run(row, argv, ProfileOptions(sync_cuda=cuda_sync), name, cwd=cwd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=Path, help="a checkout of github.com/pytorch/examples")
    parser.add_argument("--nanogpt", type=Path, help="a checkout of github.com/karpathy/nanoGPT")
    parser.add_argument("--mingpt", type=Path, help="a checkout of github.com/karpathy/minGPT")
    parser.add_argument("--xtransformers", type=Path, help="a checkout of github.com/lucidrains/x-transformers (its "
                        "train_enwik8.py; with einops, einx, loguru, fire, wandb and accelerate importable)")
    parser.add_argument("--size", type=float, default=1.0, help="multiplies each script's epoch count")
    parser.add_argument("--only", nargs="*", choices=sorted(EXAMPLES), help="these examples only")
    parser.add_argument("--note", default="", help="a sentence kept in the results (how and where it ran)")
    parser.add_argument("--results", type=Path, default=RESULTS / "public_examples.json", help="where to write the JSON")
    parser.add_argument("--accel", action="store_true", help="run each script on this machine's GPU, as its README "
                        "does there (nanoGPT: its GPU command, torch.compile on)")
    parser.add_argument("--no-cuda-sync", action="store_true", help="profile without synchronising the GPU where each "
                        "step ends (a diagnostic: does the synchronisation slow a script that overlaps host and GPU?)")
    args = parser.parse_args()
    if args.examples is None and args.nanogpt is None and args.mingpt is None and args.xtransformers is None:
        sys.exit("error: no scripts to run: give --examples (pytorch/examples) and/or --nanogpt (karpathy/nanoGPT), "
                 "--mingpt (karpathy/minGPT), --xtransformers (lucidrains/x-transformers)")
    folders = {name: args.examples / name for name in PYTORCH_EXAMPLES if args.examples is not None}
    for name in ("nanogpt", "mingpt"):
        if getattr(args, name) is not None:
            folders[name] = getattr(args, name)
    if args.xtransformers is not None:
        folders["xtransformers_enwik8"] = args.xtransformers
    if args.nanogpt is not None:
        folders["nanogpt_compiled"] = args.nanogpt
    # on a GPU nanoGPT's own command compiles already: nanogpt_compiled would be the same run
    names = args.only or [name for name in folders if not (args.accel and name == "nanogpt_compiled")]
    if not set(names) <= set(folders):
        lacking = sorted(set(names) - set(folders))
        sys.exit(f"error: --only {' '.join(lacking)} needs its checkout: give "
                 + " ".join(f"--{name.removesuffix('_compiled')}" if name.startswith(("nanogpt", "mingpt")) else
                            "--xtransformers" if name.startswith("xtransformers") else "--examples" for name in lacking))
    missing = [f"{folders[n]}/{f}" for n in names for f in REQUIRED[n] if not (folders[n] / f).is_file()]
    if missing:
        sys.exit(f"error: {', '.join(missing)} missing: give --examples a checkout of github.com/pytorch/examples "
                 "(with its wikitext-2 data), --nanogpt one of github.com/karpathy/nanoGPT, --mingpt one of "
                 "github.com/karpathy/minGPT")
    import importlib.util

    absent = sorted({m for n in names for m in EXAMPLE_PACKAGES.get(n, ()) if importlib.util.find_spec(m) is None})
    if absent:
        sys.exit(f"error: {', '.join(absent)} not importable here: pip install {' '.join(absent)} (or put them on "
                 "PYTHONPATH) for " + ", ".join(n for n in names if set(EXAMPLE_PACKAGES.get(n, ())) & set(absent)))
    if not 0 < args.size <= 20:
        sys.exit("error: --size must be in (0, 20]")
    started = time.time()
    # with --only, the other examples' rows are kept from the current results
    previous = json.loads(args.results.read_text(encoding="utf-8")) if args.only and args.results.is_file() else {}
    rows = [r for r in previous.get("rows", []) if r.get("example") not in names]
    for name in names:
        print(f"{name} ...", flush=True)
        row = measure(name, folders[name].resolve(), args.size, args.accel, cuda_sync=not args.no_cuda_sync)
        rows.append(row)
        print_row(row)
    summary = {**accuracy_summary(rows), "examples": len(rows)}
    commit = (git_commit(args.examples) if args.examples else None) or previous.get("examples_commit")
    nanogpt_commit = (git_commit(args.nanogpt) if args.nanogpt else None) or previous.get("nanogpt_commit")
    mingpt_commit = (git_commit(args.mingpt) if args.mingpt else None) or previous.get("mingpt_commit")
    xtransformers_commit = ((git_commit(args.xtransformers) if args.xtransformers else None)
                            or previous.get("xtransformers_commit"))
    result = {"benchmark": "public_examples", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "summary": summary, "rows": rows, "size": args.size, "examples_commit": commit,
              "nanogpt_commit": nanogpt_commit, "mingpt_commit": mingpt_commit,
              "xtransformers_commit": xtransformers_commit,
              "benchmark_wall_s": time.time() - started,
              "run_notes": args.note + (f" | kept rows: {previous['run_notes']}" if previous.get("run_notes") and
                                        any(r.get("example") not in names for r in rows) else "")}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.results, json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
