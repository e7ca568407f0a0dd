"""Measure a real training job: the recorder injected into the job, the explicit markers, and the
versioned Profile schema. Importing this package stays light (no pydantic, no torch)."""

from trainwise.profile.api import is_profiling, iteration, step

__all__ = ["iteration", "step", "is_profiling"]
