"""NN-TWINS in Keras 3: the I/O access-pattern MLP as Künas wrote it (Keras), on the same
SYNTHETIC TWINS-shaped data as `trainwise.workloads.nn_twins_mlp` (see there for the seed sections).

Model (Künas' thesis §4.1.1): Dense(5, ReLU) -> Dense(5, ReLU) -> Dense(3, softmax), "normal" kernel
initialiser (Keras' RandomNormal, stddev 0.05), zero biases; RMSprop(lr 0.001, rho 0.9, momentum 0.9,
epsilon 1e-7); sparse categorical cross-entropy; validation on the held-out rows after every epoch.

Run:  python -m trainwise.workloads.keras_nn_twins --epochs 1 --train-samples 1024 --val-samples 512
      (KERAS_BACKEND=torch by default; jax or tensorflow work the same)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trainwise.optional import require
from trainwise.workloads._keras_common import build_parser, import_keras, parse_args
from trainwise.workloads.synthetic_data import NUM_CLASSES, NUM_FEATURES, synth_access_patterns

NAME = "keras_nn_twins"
DEFAULTS = {"batch_size": 32, "epochs": 50, "train_samples": 27_238, "val_samples": 11_674, "lr": 0.001}


def build_arrays(train_samples: int, val_samples: int, seed: int = 0):
    """(x_train, y_train, x_val, y_val): the rows `nn_twins_mlp` trains on, as float32/int64 arrays."""
    require("sklearn.preprocessing", "the keras_nn_twins workload")
    from sklearn.preprocessing import PowerTransformer

    rng = np.random.default_rng(seed)
    x, y = synth_access_patterns(train_samples + val_samples, rng)
    transform = PowerTransformer(method="yeo-johnson", standardize=True)
    x_train = transform.fit_transform(x[:train_samples]).astype(np.float32)
    x_val = transform.transform(x[train_samples:]).astype(np.float32)
    return x_train, y[:train_samples], x_val, y[train_samples:]


def build_model(keras, lr: float = DEFAULTS["lr"]):
    normal = keras.initializers.RandomNormal(stddev=0.05)
    model = keras.Sequential([
        keras.Input(shape=(NUM_FEATURES,)),
        keras.layers.Dense(NUM_FEATURES, activation="relu", kernel_initializer=normal),
        keras.layers.Dense(NUM_FEATURES, activation="relu", kernel_initializer=normal),
        keras.layers.Dense(NUM_CLASSES, activation="softmax", kernel_initializer=normal),
    ])
    model.compile(optimizer=keras.optimizers.RMSprop(learning_rate=lr, rho=0.9, momentum=0.9, epsilon=1e-7),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def main(argv: Sequence[str] | None = None, callbacks: list | None = None) -> int:
    parser = build_parser("NN-TWINS access-pattern MLP (5-5-5-3, RMSProp) in Keras 3, per Künas' MSc thesis (UFRGS 2023).",
                          **DEFAULTS)
    args = parse_args(parser, argv)
    keras = import_keras(args)
    x_train, y_train, x_val, y_val = build_arrays(args.train_samples, args.val_samples, args.seed)
    print("data: synthetic (TWINS-shaped I/O access-pattern table: 5 metrics, 3 classes; Yeo-Johnson + "
          f"standardised as in the seed); keras {keras.__version__}, backend {keras.config.backend()}", flush=True)
    model = build_model(keras, args.lr)
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, validation_data=(x_val, y_val),
              shuffle=True, verbose=args.verbose, callbacks=callbacks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
