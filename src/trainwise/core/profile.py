"""The Profile: what one measured run of a training job tells us, as versioned JSON.

Times are seconds since the launcher started the process (`*_s`), durations are seconds, sizes are
bytes. Every number here is *measured* on the host named in `environment`; consumers that import a
profile from another machine say so (provenance lives with the number's consumer, e.g. a plan row).
Reading, checking and building profiles lives in `trainwise.profile.schema`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trainwise import __version__
from trainwise._io import atomic_write_text
from trainwise.core import stats
from trainwise.core.host_noise import HostNoise
from trainwise.core.iterations import Iteration, Iterations  # noqa: F401 - Iteration re-exported
from trainwise.core.workload import WorkloadCharacterisation

# 2: iterations as columns (trainwise.core.iterations); version 1 files (a row per iteration) still read
PROFILE_SCHEMA_VERSION = 2


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Measurement(_Model):
    """A duration with its spread (mean and its 95 % interval, median, IQR, extremes)."""

    n: int = Field(ge=0)
    mean_s: float = Field(ge=0)
    median_s: float = Field(ge=0)
    std_s: float = Field(ge=0)
    iqr_s: float = Field(ge=0)
    min_s: float = Field(ge=0)
    max_s: float = Field(ge=0)
    ci95_low_s: float = Field(ge=0)
    ci95_high_s: float = Field(ge=0)

    @classmethod
    def of(cls, times_s: list[float]) -> "Measurement":
        if not times_s:
            return cls(n=0, mean_s=0, median_s=0, std_s=0, iqr_s=0, min_s=0, max_s=0, ci95_low_s=0, ci95_high_s=0)
        s = stats.summarise([max(0.0, t) for t in times_s])
        high = s.ci95_high_s if s.ci95_high_s != float("inf") else s.mean_s * 10
        return cls(n=s.n, mean_s=s.mean_s, median_s=s.median_s, std_s=s.std_s, iqr_s=s.iqr_s, min_s=s.min_s,
                   max_s=s.max_s, ci95_low_s=s.ci95_low_s, ci95_high_s=high)

    @property
    def relative_ci95_halfwidth(self) -> float:
        return (self.ci95_high_s - self.ci95_low_s) / 2 / self.mean_s if self.mean_s > 0 else 0.0


class ValidationPass(_Model):
    epoch: int = Field(ge=0)
    start_s: float
    wall_s: float = Field(ge=0)
    batches_timed: int = Field(ge=0)
    batches_total: int | None = Field(default=None, ge=0, description="batches in a full pass, when the loader has a length")
    samples: int = Field(ge=0)
    truncated: bool
    batch_wall_s: list[float]
    data_wait_s: float = Field(ge=0)
    loader: int | None = Field(default=None, ge=0, description=(
        "which DataLoader the pass iterated, numbered in the order the script first iterated each (passes over one "
        "loader are alike: validation is modelled per loader; loaders over one dataset object with one batch size, "
        "built anew for each evaluation, share a number); None when not known (a framework's validation loop)"))
    continued: bool = Field(default=False, description=(
        "a later segment of one iterator the script keeps (a validation batch drawn every N steps from an endless "
        "cycle of the loader): its first batch starts no pass"))


class LevelProbe(_Model):
    """The host-noise probe timed beside the sampled steps: the host's speed level there."""

    where: Literal["before", "after"] = Field(description="right before the sampled steps (after iteration 1) or right after them")
    after_iteration: int = Field(ge=0)
    level_s: float = Field(gt=0, description="seconds per probe sample (host_noise.probe_level_s); higher is slower")


class Epoch(_Model):
    index: int = Field(ge=0)
    start_s: float
    end_s: float | None
    iterations: int = Field(ge=0)
    truncated: bool
    batches_per_epoch: int | None = None


class InitBreakdown(_Model):
    """T(Init): launch → first iteration start, split where the hooks could see it."""

    total_s: float = Field(ge=0)
    python_startup_s: float = Field(ge=0, description="launch → interpreter ready (trainwise bootstrap)")
    import_torch_s: float | None = Field(default=None, ge=0)
    before_torch_s: float | None = Field(default=None, ge=0, description="script code before `import torch` finished")
    model_build_s: float | None = Field(default=None, ge=0, description="first nn.Module built → first optimizer built")
    data_setup_s: float | None = Field(default=None, ge=0, description="first DataLoader built → next mark")
    optimizer_setup_s: float | None = Field(default=None, ge=0, description="building the first optimizer (torch's lazy imports)")
    other_s: float = Field(ge=0, description="the rest of the script's set-up")
    marks: dict[str, float]


class DatasetShape(_Model):
    n_train: int | None = Field(default=None, ge=0)
    n_val: int | None = Field(default=None, ge=0)
    train_batches_per_epoch: int | None = Field(default=None, ge=0)
    val_batches_per_pass: int | None = Field(default=None, ge=0)
    batches_per_iteration: float = Field(gt=0, description="> 1 with gradient accumulation")
    global_batch_size: int = Field(ge=0, description="samples per optimizer step, all batches of the step")
    val_batch_size: int | None = Field(default=None, ge=0)
    drop_last: bool = False
    num_workers: int = 0

    @property
    def iterations_per_epoch(self) -> int | None:
        if self.train_batches_per_epoch is None:
            return None
        return max(1, round(self.train_batches_per_epoch / self.batches_per_iteration))


class Memory(_Model):
    peak_rss_bytes: int = Field(ge=0)
    peak_device_bytes: int | None = Field(default=None, ge=0)


class ModelShape(_Model):
    parameters: int = Field(default=0, ge=0)
    trainable_parameters: int = Field(default=0, ge=0)
    gradient_bytes: int = Field(default=0, ge=0)
    device: str = "cpu"
    parameter_dtypes: list[str] = []
    optimizer: str | None = None
    # A closure optimizer's most closure evaluations in one step (LBFGS's max_iter): steps that run
    # this many have not converged yet, and may run fewer later
    closure_evaluation_cap: int | None = Field(default=None, ge=1)


class Environment(_Model):
    python_version: str
    platform: str
    hostname: str
    cpu_model: str
    logical_cores: int | None
    torch_version: str | None
    torch_threads: int | None
    device: str
    device_name: str | None
    # Allocator variables the job ran with (MALLOC_*, GLIBC_TUNABLES, LD_PRELOAD): step time
    # depends on them, so a prediction holds for a launch with the same ones.
    allocator_env: dict[str, str] = Field(default_factory=dict)
    # Whether denormal floats were flushed to zero (trainwise.denormals): CPU step time depends on
    # it; None in profiles made before trainwise recorded it.
    flush_denormal: bool | None = None


class SteadyState(_Model):
    """Robust per-iteration time after warm-up, with its spread."""

    warmup_iterations: int = Field(ge=0)
    iteration: Measurement
    data_wait: Measurement
    compute: Measurement
    first_iteration_s: float = Field(ge=0, description="T(It1): the cold-start iteration")
    epoch_start_extra_s: float | None = Field(default=None, description="first iteration of a later epoch minus the steady mean")
    stop_reason: str
    stabilised_after: int | None = Field(default=None, description="epoch-1 iterations sampled when the estimate was judged stable")
    relative_drift: float | None = Field(default=None, description=(
        "relative gap between the medians of the steady sample's two halves; None when too few steady "
        "iterations were sampled to measure it"))
    sampling_stopped_by: str | None = Field(default=None, description=(
        "what ended epoch-1 sampling of a sampled profile: stable, max_iterations, time_budget (--max-seconds) "
        "or cost_budget (--epochs/--budget); None for --full and for profiles written before it was recorded"))

    @field_validator("relative_drift", mode="before")
    @classmethod
    def _unmeasured_drift_is_none(cls, value: Any) -> Any:
        # the stopping rule reports an unmeasurable drift as inf; JSON has no inf (it is written as null),
        # so keeping it would make a saved profile read back different from the one in memory
        return None if isinstance(value, float) and not math.isfinite(value) else value


class OptimizerStateZeros(_Model):
    """Zeros in the optimizer state the step takes a square root of (Adam's exp_avg_sq, RMSprop's
    square_avg, Adagrad's sum), counted when sampling stopped, and what a square root of a zero costs
    on this CPU: torch's CPU sqrt of a zero can cost an order of magnitude more than of a normal float
    (benchmarks/results/sqrt_zeros.json: 13.5x here), and an embedding's rows stay zero until a batch
    touches them, so such a job's steps get faster as training fills the state in, after a short
    profile has ended."""

    optimizer: str
    state: str = Field(description="the state entries counted (names joined by '+')")
    elements: int = Field(ge=0, description="CPU floating-point elements of those entries")
    zeros: int = Field(ge=0)
    sqrt_state_ns_per_element: float | None = Field(default=None, ge=0, description=(
        "torch.sqrt of the state as it was when sampling stopped, measured here (per element of a fused step: "
        "square_root_timed_in)"))
    sqrt_zero_ns_per_element: float | None = Field(default=None, ge=0, description="torch.sqrt of zeros, measured here")
    sqrt_normal_ns_per_element: float | None = Field(default=None, ge=0, description="torch.sqrt of ones, measured here")
    step_time_at_stake_s: float | None = Field(default=None, ge=0, description=(
        "elements x (state - normal) sqrt time: how much shorter each step gets once no zero is left (the "
        "speed-up still to come, at most); None when there were too few zeros to time"))
    steps: int | None = Field(default=None, ge=0, description="optimizer steps taken when `zeros` was counted")
    sparse_elements: int | None = Field(default=None, ge=0, description=(
        "elements of the state tensors that had zeros at the first count (an embedding's; dense layers fill in at once)"))
    square_root_timed_in: str | None = Field(default=None, description=(
        "how the sqrt_* costs were timed: 'torch.sqrt' (what Adam's, RMSprop's and Adagrad's for-each and "
        "single-tensor steps call) or 'fused step' (a copy of a fused optimizer's whole step: its kernel takes "
        "the square root itself); None in profiles before 2026-11-26"))
    trajectory: list[tuple[int, int]] = Field(default_factory=list, description=(
        "(optimizer steps, zeros) counted during the run after steps about 1.5x apart: how fast training fills the "
        "state in (trainwise.predict.state_zeros fits it)"))

    @property
    def zero_fraction(self) -> float:
        return self.zeros / self.elements if self.elements else 0.0


class OptimizerStateSubnormals(_Model):
    """Subnormal floats in the optimizer's per-element state (Adam's moments, SGD's momentum buffer), counted
    when sampling stopped, and what a step costs on this CPU when that state is subnormal: a parameter whose
    gradient stays zero (a ReLU unit that stopped firing, an embedding row no batch reaches) has moments that
    decay into the subnormal range and stick there, and x86 CPUs compute on subnormals in microcode, so a
    long run's steps can slow down after a short profile has ended (trainwise.profile._state_subnormals)."""

    optimizer: str
    elements: int = Field(ge=0, description="CPU floating-point state elements shaped like their parameters")
    subnormals: int | None = Field(default=None, ge=0, description="of them subnormal when sampling stopped (None: not counted, too large)")
    steps: int | None = Field(default=None, ge=0, description="optimizer steps taken when they were counted")
    step_normal_ns_per_element: float | None = Field(default=None, ge=0, description=(
        "a step of a copy of the optimizer (its class and first group's settings) per state value, over elements "
        "with zero gradient and normal state values, measured here; None when it cannot step without the job's closure"))
    step_subnormal_ns_per_element: float | None = Field(default=None, ge=0, description=(
        "the same with subnormal state values, measured here"))

    @property
    def worst_step_added_s(self) -> float | None:
        """How much longer a step gets once every state element not yet subnormal is: the worst case."""
        if self.step_normal_ns_per_element is None or self.step_subnormal_ns_per_element is None:
            return None
        penalty_ns = max(0.0, self.step_subnormal_ns_per_element - self.step_normal_ns_per_element)
        return (self.elements - (self.subnormals or 0)) * penalty_ns * 1e-9


class EpochLoopExits(_Model):
    """Tests that leave the script's epoch loop besides its count (early stopping, a target accuracy, a time limit):
    the run may end before the epochs predicted, when training decides."""

    where: str = Field(description="the epoch loop, e.g. \"train.py:120: for epoch in range(args.epochs)\"")
    tests: list[str] = Field(description="the tests that leave it, as written (at most three)")


class ScriptEpochs(_Model):
    """The epoch count the profiled script sets for itself (its argparse `--epochs`, Keras
    `fit(epochs=)`, Lightning `Trainer(max_epochs=)`, HF `num_train_epochs`): the N_ep of the run the
    user launches, which `predict` and `plan` take when not told another."""

    epochs: int = Field(ge=1)
    source: str = Field(description="where it was read, e.g. \"the script's argparse argument epochs=30\"")


class ScriptIterations(_Model):
    """The optimizer steps the profiled script trains for, when its loop is bound by a step budget rather
    than an epoch count (`--max_steps`, nanoGPT's `max_iters`, HF `TrainingArguments(max_steps=)`):
    `predict` and `plan` turn it into epochs of the profile's iterations per epoch."""

    iterations: int = Field(ge=1)
    source: str = Field(description="where it was read, e.g. \"the script's module-level max_iters = 2000\"")


class TorchCompile(_Model):
    """What torch.compile did in the profiled process (its first iterations and validation pass compile)."""

    compile_s: float | None = Field(default=None, ge=0, description="seconds compiling (dynamo's records), None if "
                                    "this torch keeps none")
    graphs: int = Field(ge=1, description="graphs compiled")
    fx_cache_hits: int = Field(default=0, ge=0, description="inductor FX-graph cache hits")
    fx_cache_misses: int = Field(default=0, ge=0, description="inductor FX-graph cache misses: compiled from scratch "
                                 "here, found in the cache by a later run on this machine")
    codegen_s: float | None = Field(default=None, ge=0, description="of compile_s, inductor's compile of each graph "
                                    "(code generation, C++/Triton builds): what a graph found in its cache skips")


class AcceleratorQuery(_Model):
    """Whether the profiled command asked torch for an accelerator (trainwise.agent.accelerator_queries)."""

    asked: bool = Field(description="it called torch.cuda.is_available(), torch.accelerator... (or imported torch_xla)")
    query: str | None = Field(default=None, description="the first such call, e.g. torch.cuda.is_available")
    caller: str | None = Field(default=None, description="file:line of that call (the script or a library)")
    t_s: float | None = Field(default=None, ge=0, description="when, seconds after the launch")
    xla: bool = Field(default=False, description="torch_xla was imported: the command can run on a TPU or Trainium")


class FullRun(_Model):
    """Recorded only with `--full`: the real totals the prediction is judged against."""

    training_end_s: float = Field(ge=0, description="launch → end of the last iteration or validation pass")
    epochs_completed: int = Field(ge=0)


# How a profile of a reference workload taken on a small slice says so in its notes (`trainwise plan` takes it
# and models the full-size step): reports and `predict` find it by this opening.
SLICE_NOTE_PREFIX = "profiled on a slice"


def reference_workload_command(command: Any) -> bool:
    """The command runs one of trainwise's reference workloads (`-m trainwise.workloads.NAME`): it takes --device."""
    return any(str(arg).startswith("trainwise.workloads.") for arg in command)


def slice_note(notes: Any) -> str:
    """The note of `notes` that says the profile is a slice, or ""."""
    return next((str(n) for n in notes if str(n).startswith(SLICE_NOTE_PREFIX)), "")


class Profile(_Model):
    schema_version: Literal[2] = PROFILE_SCHEMA_VERSION
    trainwise_version: str = __version__
    created_at: str
    workload: str | None = None
    command: list[str]
    mode: Literal["sampled", "full"]
    stop_reason: str
    process_wall_s: float = Field(ge=0, description="launch → process exit, as the launcher saw it")
    exit_code: int
    environment: Environment
    init: InitBreakdown
    iterations: Iterations
    validations: list[ValidationPass]
    epochs: list[Epoch]
    dataset: DatasetShape
    memory: Memory
    model: ModelShape
    steady_state: SteadyState
    full_run: FullRun | None = None
    # One training step traced on the meta device after sampling (per-operator FLOPs/bytes,
    # parameters, memory): what the device model predicts other accelerators from. None when the
    # model could not be traced or `--no-characterise` was given.
    characterisation: WorkloadCharacterisation | None = None
    # None when the optimizer keeps no such state, or in profiles made before trainwise counted it
    optimizer_state_zeros: OptimizerStateZeros | None = None
    # None when the optimizer keeps no per-element state on the CPU, or in profiles made before trainwise timed it
    optimizer_state_subnormals: OptimizerStateSubnormals | None = None
    # This host's speed wander (`trainwise host-noise`), attached when it was measured on this host:
    # the estimator widens its band by it. None when never measured here.
    host_noise: HostNoise | None = None
    # None when the script's epoch count could not be read (or in profiles made before trainwise read it)
    script_epochs: ScriptEpochs | None = None
    # None when the epoch loop leaves only at its count, could not be read, or in profiles made before trainwise read it
    epoch_loop_exits: EpochLoopExits | None = None
    script_iterations: ScriptIterations | None = None
    # The host's speed level beside the sampled steps (sampled profiles on CPU; empty otherwise, or when
    # --level-probe-seconds 0): with host_noise's mean level, the estimator's level correction
    level_probes: list[LevelProbe] = []
    # The share of this host's CPU time its hypervisor gave to other guests during the sampled steps (Linux
    # /proc/stat "steal"; a whole --full run's training): a VM's steps run slower while it is taken. None where it
    # cannot be read (not Linux) or in profiles made before trainwise read it.
    sample_cpu_steal: float | None = Field(default=None, ge=0, le=1, description=(
        "share of the host's CPU time its hypervisor gave to other guests during the sampled steps (/proc/stat)"))
    # None when nothing was compiled (or in profiles made before trainwise read it)
    torch_compile: TorchCompile | None = None
    # None when torch was never imported (or in profiles made before trainwise looked)
    accelerator_query: AcceleratorQuery | None = None
    notes: list[str] = []

    @property
    def reference_workload(self) -> bool:
        """A profile of one of trainwise's reference workloads (named, or run by its module)."""
        return self.workload is not None or reference_workload_command(self.command)

    @property
    def cpu_only_command(self) -> bool:
        """Profiled on the CPU by a command that never asked torch for an accelerator: on a GPU machine it would
        run on the CPU just the same (its model never moves to a device it was not told of)."""
        env = self.environment
        if self.reference_workload:
            return False  # trainwise's reference workloads take --device; a saved GPU plan passes `--device cuda`
        return (self.accelerator_query is not None and not self.accelerator_query.asked
                and env.device_name is None and str(env.device or "cpu").startswith("cpu"))

    # ---- persistence ----
    def to_json(self) -> str:
        """The profile as JSON: NaN/Infinity refused with the field named, and command arguments that
        are not UTF-8 (a path with a byte such as 0xff) kept as \\udcXX escapes that read back as the
        same bytes, never a serialisation error after the training ran."""
        from trainwise.userfiles import json_text

        # the iteration columns on one line each (indented, 200,000 iterations would be 1.4 million lines)
        rest = json_text(self.model_dump(mode="python", exclude={"iterations"}), "the profile")
        columns = json_text(self.iterations.as_columns(), "the profile's iterations", indent=None)
        return rest[:-2] + ',\n "iterations": ' + columns + "\n}"

    def save(self, path: str | Path) -> Path:
        return atomic_write_text(path, self.to_json())
