"""A LightningModule compiled with torch.compile (as Lightning's docs advise), trained by a Trainer: its network runs
only inside compiled code, and a torchmetrics metric is built (its hash reads state its __init__ sets)."""
import argparse

import lightning as L
import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--max-epochs", type=int, default=2)
parser.add_argument("--samples", type=int, default=2048)
args = parser.parse_args()


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
        self.accuracy = torchmetrics.classification.BinaryAccuracy()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.accuracy(self.net(x).argmax(1), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


torch.manual_seed(0)
x = torch.randn(args.samples, 32)
y = (x[:, 0] > 0).long()
train = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
val = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=64)
model = torch.compile(Classifier(), backend="eager")
L.Trainer(max_epochs=args.max_epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
          enable_progress_bar=False, enable_model_summary=False).fit(model, train, val)
