import sys
import time

import torch

# With a path: one optimizer step, a checkpoint saved there, then the hang (a profile with --timeout
# kills it after its save went to a scratch file).
if len(sys.argv) > 1:
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    torch.save(model.state_dict(), sys.argv[1])
time.sleep(600)
