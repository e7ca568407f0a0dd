"""A bag-of-words classifier with Adam: most of its embedding rows are never touched, so Adam's
exp_avg_sq stays zero there (the state trainwise counts and times at the end of a profile).
With --fused: torch's fused Adam (the Hugging Face Trainer's default), whose kernel takes the square root."""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
VOCAB, USED = 200_000, 500  # batches only ever use the first USED word ids
tokens = torch.randint(0, USED, (512, 16))
labels = (tokens[:, 0] % 2).float()
loader = DataLoader(TensorDataset(tokens, labels), batch_size=32, shuffle=True)
model = torch.nn.EmbeddingBag(VOCAB, 8, mode="mean")
head = torch.nn.Linear(8, 1)
optimizer = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-3,
                             fused="--fused" in sys.argv)
for epoch in range(2):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(head(model(xb)).squeeze(-1), yb)
        loss.backward()
        optimizer.step()
