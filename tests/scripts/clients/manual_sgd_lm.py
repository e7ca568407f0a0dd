"""A word-level language model trained by hand, as in the PyTorch examples' word_language_model: no
torch.optim, no DataLoader (batches are slices of one tensor), model.eval() + no_grad validation."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batches", type=int, default=60, help="training batches per epoch")
parser.add_argument("--hidden", type=int, default=128)
parser.add_argument("--lr", type=float, default=0.5)
parser.add_argument("--save", default="", help="save the whole model (torch.save(model)) after every epoch")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
vocab, bptt, batch = 500, 20, 16
train_data = torch.randint(vocab, (args.batches * bptt + 1, batch))
val_data = torch.randint(vocab, (max(2, args.batches // 6) * bptt + 1, batch))


class RNNModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Embedding(vocab, args.hidden)
        self.rnn = torch.nn.LSTM(args.hidden, args.hidden)
        self.decoder = torch.nn.Linear(args.hidden, vocab)

    def forward(self, x):
        out, _ = self.rnn(self.encoder(x))
        return self.decoder(out)


model = RNNModel()
criterion = torch.nn.CrossEntropyLoss()


def get_batch(source, i):
    return source[i:i + bptt], source[i + 1:i + 1 + bptt].reshape(-1)


def train():
    model.train()
    for i in range(0, train_data.size(0) - 1, bptt):
        data, targets = get_batch(train_data, i)
        model.zero_grad()
        loss = criterion(model(data).view(-1, vocab), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-args.lr)


def evaluate(source):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, bptt):
            data, targets = get_batch(source, i)
            total += criterion(model(data).view(-1, vocab), targets).item()
    return total


for epoch in range(1, args.epochs + 1):
    train()
    print(f"epoch {epoch} val loss {evaluate(val_data):.2f}", flush=True)
    if args.save:  # as the examples' word_language_model keeps its best model: the module pickled whole
        with open(args.save, "wb") as f:
            torch.save(model, f)
