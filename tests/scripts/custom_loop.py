"""A loop with no optimizer object and no DataLoader: it marks iterations with the explicit API."""
import torch

import trainwise.profile as twp

weights = torch.zeros(16, requires_grad=True)
data = torch.randn(400, 16)
for i in range(0, 400, 8):
    with twp.iteration(samples=8):
        loss = (data[i:i + 8] @ weights - 1).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            weights -= 0.01 * weights.grad
            weights.grad.zero_()
