"""A loop in nanoGPT's shape (written for trainwise's tests): settings are module-level globals that
`--key=value` arguments override, batches are drawn from a tensor (no DataLoader), the loss is
estimated under no_grad every `eval_interval` iterations, and the loop ends after `max_iters` steps."""

import sys
from ast import literal_eval

import torch

max_iters = 5000
eval_interval = 50
eval_iters = 4
batch_size = 16
block_size = 32
vocab = 64
for arg in sys.argv[1:]:  # the configurator: `--max_iters=300`
    key, value = arg[2:].split("=")
    assert key in globals(), key
    globals()[key] = literal_eval(value)

torch.manual_seed(0)
data = torch.randint(vocab, (20_000,))
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 64), torch.nn.Linear(64, 128), torch.nn.GELU(),
                            torch.nn.Linear(128, vocab))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)


def get_batch():
    ix = torch.randint(len(data) - block_size - 1, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = [torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
              for x, y in (get_batch() for _ in range(eval_iters))]
    model.train()
    return sum(losses) / len(losses)


iter_num = 0
while True:
    if iter_num % eval_interval == 0:
        print(f"step {iter_num}: val loss {estimate_loss():.4f}")
    x, y = get_batch()
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    if iter_num > max_iters:
        break
