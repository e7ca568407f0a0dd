"""The training precisions trainwise models (one list for the pydantic types in `trainwise.core.workload` and the
step tracer that runs inside the user's job, where only the standard library and torch can be assumed)."""

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "amp_fp16", "amp_bf16")
