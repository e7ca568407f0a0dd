"""MNIST / Simple-CNN trained through PyTorch-Ignite: the model, data and optimizer of
`trainwise.workloads.mnist_cnn` (Malta's dissertation), in the shape of Ignite's own `examples/mnist/mnist.py`:
`create_supervised_trainer`, and an `EPOCH_COMPLETED` handler that runs the evaluator over the training set and
then the validation set, at `--eval-batch-size` (larger than training's, as there).

A plain Ignite script: it imports no trainwise profiling code. Under
``trainwise profile -- python -m trainwise.workloads.ignite_mnist`` the profiler gives the trainer its handler.

Run:  python -m trainwise.workloads.ignite_mnist --epochs 1 --batch-size 64 --train-samples 640 --val-samples 256
"""

from __future__ import annotations

from collections.abc import Sequence

from trainwise.optional import require
require("ignite", "the ignite_mnist workload")
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.metrics import Accuracy, Loss
from torch import nn
from torch.utils.data import DataLoader

from trainwise.workloads import mnist_cnn
from trainwise.workloads._common import build_parser, parse_args, setup, shuffle_generator

NAME = "ignite_mnist"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser("MNIST Simple-CNN (Malta's dissertation) trained with PyTorch-Ignite, evaluated on the "
                          "training and validation sets after every epoch.", **mnist_cnn.DEFAULTS)
    parser.add_argument("--eval-batch-size", type=int, default=1000, help="the evaluator's batch size (default 1000)")
    parser.add_argument("--no-eval-train", action="store_true", help="evaluate the validation set only")
    args = parse_args(parser, argv)
    device = setup(args)
    train_ds, val_ds, data_line = mnist_cnn.build_datasets(args.train_samples, args.val_samples, seed=args.seed)
    print(data_line, flush=True)
    train_loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True,
                              generator=shuffle_generator(args.seed), num_workers=args.num_workers)
    train_eval_loader = DataLoader(train_ds, batch_size=args.eval_batch_size, num_workers=args.num_workers)
    val_loader = DataLoader(val_ds, batch_size=args.eval_batch_size, num_workers=args.num_workers)
    model = mnist_cnn.build_model().to(device)
    criterion = nn.CrossEntropyLoss()
    trainer = create_supervised_trainer(model, mnist_cnn.build_optimizer(model, args.lr), criterion, device=device)
    evaluator = create_supervised_evaluator(model, metrics={"accuracy": Accuracy(), "loss": Loss(criterion)},
                                            device=device)

    @trainer.on(Events.EPOCH_COMPLETED)
    def evaluate(engine) -> None:
        loaders = [("validation", val_loader)] if args.no_eval_train else [("training", train_eval_loader),
                                                                          ("validation", val_loader)]
        for name, loader in loaders:
            metrics = evaluator.run(loader).metrics
            print(f"epoch {engine.state.epoch} {name}: accuracy {metrics['accuracy']:.4f}, loss {metrics['loss']:.4f}",
                  flush=True)

    trainer.run(train_loader, max_epochs=args.epochs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
