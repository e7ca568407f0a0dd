"""RNN-SA: LSTM sentiment analysis (Künas' MSc thesis, UFRGS 2023) on SYNTHETIC token sequences of the thesis' shape.

Source (Künas 2023 (thesis)):
  * §4.2 "Text Classification": IMDb reviews (Maas et al. 2011), 50,000 balanced positive/negative;
    punctuation and stop words removed, lower-cased; "Sequences are limited to a fixed size (300
    words)"; 80 % / 20 % train/test split.
  * §4.2.1 "RNN-SA Architecture": input (300) -> embedding (vocabulary 20,000, dimension 128) ->
    LSTM with 128 units and dropout 0.2 -> Dense 128 ReLU -> Dense 64 ReLU -> Dense with a sigmoid,
    "The final product is a single output" (the text also says "2 in the last"; a single sigmoid unit
    is what a sigmoid binary classifier has, so we use one logit); "Uniform" kernel initializer.
  * §6.2.2 "Accuracy Evaluation - RNN-SA": "trained the RNN-SA model on 36,000 samples, validate on
    10,000 samples, and tested it on 4,000 samples, and limiting to 5 epochs ... batch size of 1024".
  * The optimizer and learning rate are not stated in the seed: we ASSUME Adam with Keras' default
    learning rate 0.001 and binary cross-entropy (the usual Keras setup for this model).

Model: Embedding(20000, 128) -> Dropout 0.2 (Keras' LSTM input dropout) -> LSTM(128) -> last hidden
state -> Linear 128 ReLU -> Linear 64 ReLU -> Linear 1 (sigmoid folded into BCEWithLogitsLoss); dense
weights ~ U(-0.05, 0.05) (Keras "uniform"), zero biases.

Data (SYNTHETIC, nothing downloaded): 300-token sequences over a 20,000-word vocabulary (index 0 is
padding); review lengths log-normal (median ~120 words after stop-word removal) clipped to 10-300 and
pre-padded like Keras ``pad_sequences``; word ids log-uniform (Zipf-like); positive / negative reviews
carry words from disjoint "sentiment" id ranges at different rates. Generated once, deterministically,
into int32 tensors (46,000 x 300 x 4 bytes = 55 MB at the seed's sizes).

Run:  python -m trainwise.workloads.rnn_sa_lstm --epochs 1 --batch-size 64 --train-samples 128 --val-samples 64
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from trainwise.workloads.synthetic_data import (  # noqa: F401 - re-exported
    NEGATIVE_WORDS,
    POSITIVE_WORDS,
    SEQ_LEN,
    VOCAB_SIZE,
    synth_reviews,
)
from trainwise.workloads._common import (
    build_parser,
    fit,
    loader_kwargs,
    parse_args,
    print_header,
    setup,
    shuffle_generator,
)

NAME = "rnn_sa_lstm"
DEFAULTS = {
    "batch_size": 1024,  # §6.2.2
    "epochs": 5,  # §6.2.2
    "train_samples": 36_000,  # §6.2.2
    "val_samples": 10_000,  # §6.2.2
    "lr": 0.001,  # not in the seed: Keras' Adam default (assumption)
}
EMBED_DIM = 128
LSTM_UNITS = 128


class SentimentLSTM(nn.Module):
    def __init__(self, vocab_size: int = VOCAB_SIZE, embed_dim: int = EMBED_DIM, units: int = LSTM_UNITS):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.dropout = nn.Dropout(0.2)
        self.lstm = nn.LSTM(embed_dim, units, batch_first=True)
        self.head = nn.Sequential(
            nn.Linear(units, units),
            nn.ReLU(),
            nn.Linear(units, 64),
            nn.ReLU(),
            nn.Linear(64, 1),
        )
        for m in self.head:
            if isinstance(m, nn.Linear):
                nn.init.uniform_(m.weight, -0.05, 0.05)  # Keras "uniform" initializer
                nn.init.zeros_(m.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.embedding(tokens))
        _, (h_n, _) = self.lstm(x)
        return self.head(h_n[-1]).squeeze(-1)  # one logit per review


def build_model() -> nn.Module:
    return SentimentLSTM()


def build_optimizer(model: nn.Module, lr: float = DEFAULTS["lr"]) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=lr, eps=1e-7)


def build_datasets(
    train_samples: int = DEFAULTS["train_samples"],
    val_samples: int = DEFAULTS["val_samples"],
    seed: int = 0,
) -> tuple[Dataset, Dataset, str]:
    """Return (train dataset, validation dataset, the ``data: ...`` source line)."""
    rng = np.random.default_rng(seed)
    x_tr, y_tr = synth_reviews(train_samples, rng)
    x_va, y_va = synth_reviews(val_samples, rng)
    train = TensorDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr))
    val = TensorDataset(torch.from_numpy(x_va), torch.from_numpy(y_va))
    line = (
        f"data: synthetic (IMDb-shaped token sequences: vocabulary {VOCAB_SIZE}, length {SEQ_LEN}, "
        "pre-padded; binary sentiment)"
    )
    return train, val, line


def binary_correct(out: torch.Tensor, y: torch.Tensor) -> int:
    """Correct predictions of a one-logit binary classifier (positive when the logit is above 0)."""
    return int(((out > 0).float() == y).sum().item())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(
        "RNN-SA LSTM sentiment classifier (embedding 128, LSTM 128, dense 128-64-1), per Künas' MSc thesis (UFRGS 2023).",
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
    criterion = nn.BCEWithLogitsLoss()
    optimizer = build_optimizer(model, args.lr)

    fit(model, train_loader, val_loader, criterion, optimizer, device, args.epochs, count_correct=binary_correct)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
