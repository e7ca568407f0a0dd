"""Keep the user's global batch when a plan scales out: N devices split it (strong scaling), so every
ranked plan trains the same job — the same samples per optimizer step, the same epochs.

A split is refused (the plan is pruned, with its reason counted and shown) when
- the global batch does not divide over the devices (a parallelism the step cannot use as it is), or
- the per-device batch falls below `MIN_PER_DEVICE_BATCH`: batch-norm statistics degrade sharply
  below about 8 samples per device (Wu & He, "Group Normalization", ECCV 2018, Fig. 1) and an
  accelerator runs far below its throughput on so little work.

The step at the smaller per-device batch comes from the job's characterisation with its batch-sized
work scaled to the new batch (`rebatch`): forward and backward FLOPs, bytes, activations and the batch
dimension of their shapes scale with the batch; the parameters, gradients and optimizer step do not.
"""

from __future__ import annotations

from typing import Any

MIN_PER_DEVICE_BATCH = 8
# A characterisation note that marks the job's full-size step (traced at the job's global batch), when
# the profile itself was measured on a small slice of it (`trainwise plan` with no profile does this).
FULL_SIZE_NOTE = "full-size job:"

# Pruning reasons, as the terminal and the report show them.
REASON_INDIVISIBLE = "global batch does not split evenly over the devices"
REASON_FLOOR = f"per-device batch below {MIN_PER_DEVICE_BATCH}"
REASON_SLICE = "only a slice at another batch measured there"


def job_global_batch(profile: Any) -> int:
    """The samples per optimizer step of the job to plan: the profile's own, except when the profile
    was taken on a slice and carries the full-size job's characterisation (marked FULL_SIZE_NOTE)."""
    char = getattr(profile, "characterisation", None)
    if char is not None and any(str(note).startswith(FULL_SIZE_NOTE) for note in getattr(char, "notes", ()) or ()):
        return int(char.per_device_batch)
    return max(1, int(profile.dataset.global_batch_size))


def is_slice(profile: Any) -> bool:
    """The profile measured a slice of the job at another batch (its step is not the job's step)."""
    return job_global_batch(profile) != max(1, int(profile.dataset.global_batch_size))


def split_batch(global_batch: int, devices: int) -> tuple[int | None, str]:
    """(per-device batch, "") when `global_batch` splits over `devices`, else (None, the reason)."""
    devices = max(1, int(devices))
    if global_batch % devices:
        per_device = global_batch / devices
        return None, REASON_FLOOR if per_device < MIN_PER_DEVICE_BATCH else REASON_INDIVISIBLE
    per_device = global_batch // devices
    if devices > 1 and per_device < MIN_PER_DEVICE_BATCH:
        return None, REASON_FLOOR
    return per_device, ""


def rebatch(char: Any, per_device_batch: int) -> Any:
    """`char` (a WorkloadCharacterisation) at another per-device batch; itself when unchanged. A step of several
    passes (`passes_per_step`) keeps them, each pass at its share of the new batch."""
    old = int(char.per_device_batch)
    new = int(per_device_batch)
    if new == old:
        return char
    ratio = new / old
    old_pass = int(getattr(char, "pass_batch", None) or old)
    new_pass = max(1, round(old_pass * ratio))
    records = []
    for record in char.records:
        if record.phase == "optimizer":
            records.append(record)
            continue
        shapes = [list(shape) for shape in record.shapes]
        for shape in shapes[:1]:  # the activation (first) argument leads with the batch
            if shape and shape[0] % old_pass == 0 and shape[0] >= old_pass:
                shape[0] = max(1, int(round(shape[0] * ratio)))
        records.append(record.model_copy(update={"flops": record.flops * ratio, "bytes_read": record.bytes_read * ratio,
                                                 "bytes_written": record.bytes_written * ratio, "shapes": shapes}))
    inputs = []
    for spec in char.inputs:
        dims, _, dtype = str(spec).partition(":")
        parts = dims.split("x")
        if parts and parts[0].isdigit() and int(parts[0]) == old_pass:
            parts[0] = str(new_pass)
        inputs.append("x".join(parts) + (f":{dtype}" if dtype else ""))
    return char.model_copy(update={
        "per_device_batch": new, "records": records, "inputs": inputs,
        "pass_batch": new_pass if getattr(char, "pass_batch", None) else None,
        "activation_bytes": int(char.activation_bytes * ratio),
        "peak_temporary_bytes": int(char.peak_temporary_bytes * ratio),
        "notes": [*char.notes, f"batch-sized work scaled from the traced batch {old} to {new}"]})
