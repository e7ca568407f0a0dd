"""A tiny BERT sentiment classifier trained with the Hugging Face `Trainer`, built from a config
(randomly initialised: nothing is downloaded), on the SYNTHETIC IMDb-shaped reviews of
`trainwise.workloads.rnn_sa_lstm` (Künas' thesis §4.2; the last `--seq-len` tokens of each pre-padded review).

Model: `BertForSequenceClassification(BertConfig(hidden_size=64, num_hidden_layers=2,
num_attention_heads=2, intermediate_size=128, vocab_size=20,000, max_position_embeddings=--seq-len))`,
AdamW (the Trainer's default), evaluation after every epoch, gradient accumulation with `--accumulate`,
no checkpoints and no reporting (`save_strategy="no"`, `report_to=[]`).

A plain Trainer script: it imports no trainwise profiling code. Under
``trainwise profile -- python -m trainwise.workloads.hf_tiny_bert`` the profiler adds its callback to
the Trainer by itself.

Run:  python -m trainwise.workloads.hf_tiny_bert --epochs 1 --batch-size 16 --train-samples 256 --val-samples 64
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

import numpy as np
import torch
from trainwise.optional import require
require("transformers", "the hf_tiny_bert workload")
import transformers
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

from trainwise.workloads._common import build_parser, parse_args, setup
from trainwise.workloads.synthetic_data import SEQ_LEN, VOCAB_SIZE, synth_reviews

NAME = "hf_tiny_bert"
DEFAULTS = {"batch_size": 16, "epochs": 3, "train_samples": 4096, "val_samples": 512, "lr": 5e-4}


class ReviewDataset(Dataset):
    def __init__(self, tokens: np.ndarray, labels: np.ndarray) -> None:
        self.tokens = torch.from_numpy(tokens.astype(np.int64))
        self.mask = (self.tokens != 0).long()
        self.labels = torch.from_numpy(labels.astype(np.int64))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "attention_mask": self.mask[index], "labels": self.labels[index]}


def build_datasets(train_samples: int, val_samples: int, seq_len: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x_train, y_train = synth_reviews(train_samples, rng)
    x_val, y_val = synth_reviews(val_samples, rng)
    return ReviewDataset(x_train[:, -seq_len:], y_train), ReviewDataset(x_val[:, -seq_len:], y_val)


def build_model(seq_len: int) -> BertForSequenceClassification:
    config = BertConfig(vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=seq_len, num_labels=2)
    return BertForSequenceClassification(config)


def main(argv: Sequence[str] | None = None, callbacks: list | None = None) -> int:
    parser = build_parser("Tiny BERT sentiment classifier trained with the Hugging Face Trainer.", **DEFAULTS)
    parser.add_argument("--accumulate", type=int, default=1, help="TrainingArguments(gradient_accumulation_steps=N)")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per review (the last ones)")
    args = parse_args(parser, argv)
    # the model takes its positions from --seq-len, so only the data bounds it: `tokens[:, -n:]` would
    # keep all 300 tokens for 0, drop the first ones for a negative n, and stop at 300 for a longer one
    if args.seq_len < 1:
        parser.error(f"--seq-len must be >= 1 (got {args.seq_len})")
    if args.seq_len > SEQ_LEN:
        parser.error(f"--seq-len {args.seq_len} is longer than the synthetic reviews' {SEQ_LEN} tokens: "
                     f"use --seq-len {SEQ_LEN} or less")
    setup(args)
    train_ds, val_ds = build_datasets(args.train_samples, args.val_samples, args.seq_len, args.seed)
    print(f"data: synthetic (IMDb-shaped token sequences, last {args.seq_len} tokens); transformers "
          f"{transformers.__version__}, gradient_accumulation_steps={args.accumulate}", flush=True)
    with tempfile.TemporaryDirectory(prefix="hf-tiny-bert-") as output_dir:
        training_args = TrainingArguments(
            output_dir=output_dir, num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=args.batch_size, gradient_accumulation_steps=args.accumulate,
            learning_rate=args.lr, eval_strategy="epoch", save_strategy="no", logging_strategy="epoch",
            report_to=[], use_cpu=not args.device.startswith("cuda"), disable_tqdm=True, seed=args.seed,
            dataloader_num_workers=args.num_workers)
        trainer = Trainer(model=build_model(args.seq_len), args=training_args, train_dataset=train_ds,
                          eval_dataset=val_ds, callbacks=callbacks)
        trainer.train()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
