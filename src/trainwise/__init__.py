"""trainwise: profile a PyTorch training job for a few iterations, predict its full training time
and cost on any machine, plan where to train it, and run it."""

__version__ = "0.1.0"
