import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,))), batch_size=8)
for epoch in range(2):
    for xb, yb in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
