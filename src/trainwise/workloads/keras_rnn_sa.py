"""RNN-SA in Keras 3: the LSTM sentiment classifier as Künas wrote it (Keras), on the same
SYNTHETIC IMDb-shaped sequences as `trainwise.workloads.rnn_sa_lstm` (see there for the seed sections).

Model (Künas' thesis §4.2.1): Embedding(20,000, 128) -> LSTM(128, dropout 0.2) -> Dense(128, ReLU) ->
Dense(64, ReLU) -> Dense(1, sigmoid), "uniform" kernel initialiser (Keras' RandomUniform, ±0.05) on the
dense layers; Adam(lr 0.001) and binary cross-entropy (not stated in the seed: the usual Keras set-up,
as in the PyTorch workload); validation after every epoch.

Run:  python -m trainwise.workloads.keras_rnn_sa --epochs 1 --batch-size 16 --train-samples 128 --val-samples 64
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainwise.workloads._keras_common import build_parser, import_keras, parse_args
from trainwise.workloads.synthetic_data import SEQ_LEN, VOCAB_SIZE, synth_reviews

NAME = "keras_rnn_sa"
DEFAULTS = {"batch_size": 1024, "epochs": 5, "train_samples": 36_000, "val_samples": 10_000, "lr": 0.001}
EMBED_DIM = 128
LSTM_UNITS = 128


def build_arrays(train_samples: int, val_samples: int, seed: int = 0):
    """(x_train, y_train, x_val, y_val): the sequences `rnn_sa_lstm` trains on."""
    rng = np.random.default_rng(seed)
    x_train, y_train = synth_reviews(train_samples, rng)
    x_val, y_val = synth_reviews(val_samples, rng)
    return x_train, y_train, x_val, y_val


def build_model(keras, lr: float = DEFAULTS["lr"]):
    uniform = keras.initializers.RandomUniform(-0.05, 0.05)
    model = keras.Sequential([
        keras.Input(shape=(SEQ_LEN,), dtype="int32"),
        keras.layers.Embedding(VOCAB_SIZE, EMBED_DIM),
        keras.layers.LSTM(LSTM_UNITS, dropout=0.2),
        keras.layers.Dense(LSTM_UNITS, activation="relu", kernel_initializer=uniform),
        keras.layers.Dense(64, activation="relu", kernel_initializer=uniform),
        keras.layers.Dense(1, activation="sigmoid", kernel_initializer=uniform),
    ])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=lr, epsilon=1e-7), loss="binary_crossentropy",
                  metrics=["accuracy"])
    return model


def main(argv: Sequence[str] | None = None, callbacks: list | None = None) -> int:
    parser = build_parser("RNN-SA LSTM sentiment classifier (embedding 128, LSTM 128, dense 128-64-1) in Keras 3, "
                          "per Künas' MSc thesis (UFRGS 2023).", **DEFAULTS)
    args = parse_args(parser, argv)
    keras = import_keras(args)
    x_train, y_train, x_val, y_val = build_arrays(args.train_samples, args.val_samples, args.seed)
    print(f"data: synthetic (IMDb-shaped token sequences: vocabulary {VOCAB_SIZE}, length {SEQ_LEN}, pre-padded; "
          f"binary sentiment); keras {keras.__version__}, backend {keras.config.backend()}", flush=True)
    model = build_model(keras, args.lr)
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, validation_data=(x_val, y_val),
              shuffle=True, verbose=args.verbose, callbacks=callbacks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
