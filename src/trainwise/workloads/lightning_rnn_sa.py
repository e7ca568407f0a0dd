"""RNN-SA trained through PyTorch Lightning: the model, data and optimizer of
`trainwise.workloads.rnn_sa_lstm` (Künas' thesis §4.2), in a `LightningModule` and a `Trainer`, with
gradient accumulation (`--accumulate`) and a validation pass after every epoch.

A plain Lightning script: it imports no trainwise profiling code. Under
``trainwise profile -- python -m trainwise.workloads.lightning_rnn_sa`` the profiler adds its callback
to the Trainer by itself.

Run:  python -m trainwise.workloads.lightning_rnn_sa --epochs 1 --batch-size 8 --train-samples 128 --val-samples 64
"""

from __future__ import annotations

from collections.abc import Sequence

from trainwise.optional import require
require("lightning.pytorch", "the lightning_rnn_sa workload")
import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

from trainwise.workloads import rnn_sa_lstm
from trainwise.workloads._common import build_parser, parse_args, setup, shuffle_generator

NAME = "lightning_rnn_sa"


class SentimentModule(pl.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.model = rnn_sa_lstm.build_model()
        self.criterion = nn.BCEWithLogitsLoss()
        self.lr = lr

    def training_step(self, batch, batch_idx):
        tokens, labels = batch
        loss = self.criterion(self.model(tokens), labels)
        self.log("train_loss", loss, prog_bar=False)
        return loss

    def validation_step(self, batch, batch_idx):
        tokens, labels = batch
        logits = self.model(tokens)
        self.log("val_loss", self.criterion(logits, labels))
        self.log("val_accuracy", ((logits > 0).float() == labels).float().mean())

    def configure_optimizers(self):
        return rnn_sa_lstm.build_optimizer(self.model, self.lr)


def main(argv: Sequence[str] | None = None, callbacks: list | None = None) -> int:
    parser = build_parser("RNN-SA LSTM sentiment classifier trained with PyTorch Lightning (Künas' MSc thesis).",
                          **rnn_sa_lstm.DEFAULTS)
    parser.add_argument("--accumulate", type=int, default=1, help="Trainer(accumulate_grad_batches=N)")
    args = parse_args(parser, argv)
    setup(args)
    train_ds, val_ds, data_line = rnn_sa_lstm.build_datasets(args.train_samples, args.val_samples, seed=args.seed)
    print(data_line, f"; lightning {pl.__version__}, accumulate_grad_batches={args.accumulate}", flush=True)
    train_loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True,
                              generator=shuffle_generator(args.seed), num_workers=args.num_workers)
    val_loader = DataLoader(val_ds, batch_size=args.batch_size, shuffle=False, num_workers=args.num_workers)
    trainer = pl.Trainer(max_epochs=args.epochs, accelerator="gpu" if args.device.startswith("cuda") else "cpu",
                         devices=1, accumulate_grad_batches=args.accumulate, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks)
    trainer.fit(SentimentModule(args.lr), train_loader, val_loader)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
