import torch
model = torch.nn.Linear(4, 1)
for _ in range(3):
    model(torch.randn(2, 4)).sum().backward()
print("finished without an optimizer")
