import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(100):
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    if i == 3:
        raise RuntimeError("diverged")
