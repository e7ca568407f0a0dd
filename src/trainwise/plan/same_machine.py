"""Profile a reference workload on this machine: what `trainwise plan` does when no --profile is
given (the priced, ranked plan itself is `trainwise.plan.command`).

A workload too large to step on this machine in seconds (the default, ResNet-50 on ImageNet) is
profiled on a small slice — a few steps at a small batch, labelled so in the profile — and its
full-size step (the job's batch, the job's input size) is characterised on the meta device for the
device model: the plan is for the full-size job."""

from __future__ import annotations

from rich.console import Console

from trainwise.core.profile import SLICE_NOTE_PREFIX
from trainwise.errors import TrainwiseError
from trainwise.profile.runner import ProfileOptions, run_profile
from trainwise.profile.schema import Profile

# Workloads profiled on a slice: the batch of the slice and the profile's sampling bounds. ResNet-50
# at 224x224 takes 1-2 s a step at batch 3 on a 2-core CPU (measured on the project's machine); batch 3
# also leaves the last batch of 1,281,167 images at 2 samples (BatchNorm cannot train on one).
SLICE_PROFILES = {
    "resnet50_imagenet": {"batch_size": 3, "options": {"min_iterations": 6, "min_profile_seconds": 3.0,
                                                        "max_profile_seconds": 30.0, "validation_batches": 2,
                                                        "epoch2_iterations": 0}},
}


def is_slice_profiled(name: str) -> bool:
    return name in SLICE_PROFILES


def profile_workload_quiet(name: str, console: Console, **overrides) -> Profile:
    """Profile reference workload `name` here, without a spinner (the caller shows progress)."""
    from trainwise.workloads import command_for, get_workload

    try:
        spec = get_workload(name)
    except ValueError as exc:
        raise TrainwiseError(f"{exc} Pick one with --workload (list them with `trainwise workloads`).") from None
    sliced = SLICE_PROFILES.get(spec.name)
    if sliced is None:
        command = command_for(name, **overrides)
        console.print(f"profiling reference workload [bold]{spec.name}[/bold] ({spec.data_kind} data: "
                      f"{spec.data_description}) on this machine…")
        return run_profile(command, ProfileOptions(), workload=spec.name, quiet=True)
    command = command_for(name, **{"batch_size": sliced["batch_size"], **overrides})
    console.print(f"profiling [bold]{spec.name}[/bold] ({spec.data_kind} data) on a small slice here "
                  f"(batch {sliced['batch_size']}, a few steps); "
                  f"planning the full-size job: batch {spec.default_batch_size}, {spec.default_train_samples:,} images, "
                  f"{spec.default_epochs} epochs")
    measured = run_profile(command, ProfileOptions(**sliced["options"]), workload=spec.name, quiet=True)
    return with_full_size_characterisation(measured, spec)


def with_full_size_characterisation(profile: Profile, spec) -> Profile:
    """`profile` (measured on a slice) carrying the full-size job's step, characterised on the meta device."""
    from trainwise.plan.scaling import FULL_SIZE_NOTE
    from trainwise.predict.characterise import characterise_named

    model = spec.hyperparameters.get("characterise_as", spec.name)
    char = characterise_named(model, per_device_batch=spec.default_batch_size)
    char = char.model_copy(update={"notes": [*char.notes, f"{FULL_SIZE_NOTE} {model} at batch {spec.default_batch_size} "
                                                          "(the profile measured a slice at a small batch)"]})
    note = (f"{SLICE_NOTE_PREFIX} (batch {profile.dataset.global_batch_size}, {profile.steady_state.iteration.n} timed step(s)); "
            f"the full-size step (batch {spec.default_batch_size}) is modelled")
    return profile.model_copy(update={"characterisation": char, "notes": [*profile.notes, note]})
