"""No training at all: forward passes under no_grad for a long time (trainwise must say so quickly)."""
import sys
import time

import torch

model = torch.nn.Linear(8, 2)
deadline = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 600)
with torch.no_grad():
    while time.time() < deadline:
        model(torch.randn(4, 8))
        time.sleep(0.01)
print("done")
