"""The worst case of a CPU job's optimizer state turning subnormal over a long run (measured, not modelled).

A parameter whose gradient stays zero (a ReLU unit that stopped firing, an embedding row no batch reaches)
has moments that decay into float32's subnormal range and stick there, and x86 CPUs compute on them in
microcode (trainwise.profile._state_subnormals). Whether and when units stop learning is up to training:
a short profile sees none of it (tests/scripts/clients/checkpoint_every_epoch.py: no unit dead in the first
7,800 steps, 157 of 256 after 195,000; its step 0.56 -> 0.82 ms by the end). So the point estimate keeps
the measured step, and the band's high end takes every not-yet-subnormal state value costing the measured
subnormal penalty on every step: on that job 0.24 ms a step worst case against 0.25 ms seen once 92 % of
its state was subnormal.
"""

from __future__ import annotations

from trainwise.core.profile import Profile
from trainwise.core.units import format_duration

# A worst case under this fraction of a step is inside the steady-state spread: no note, no wider band
NOTE_FRACTION = 0.02


def worst_case(profile: Profile, total_steps: int, step_s: float) -> tuple[float, str] | None:
    """(seconds the run could take longer, the note saying so), or None when it cannot matter."""
    subnormals = profile.optimizer_state_subnormals
    added_s = subnormals.worst_step_added_s if subnormals is not None else None
    if not added_s or step_s <= 0 or added_s / step_s < NOTE_FRACTION or profile.environment.flush_denormal:
        return None
    per_value_ns = subnormals.step_subnormal_ns_per_element - subnormals.step_normal_ns_per_element
    seen = ("not counted" if subnormals.subnormals is None else
            f"{subnormals.subnormals:,} of them subnormal when sampling stopped")
    note = (f"{subnormals.optimizer}'s per-element state ({subnormals.elements:,} values; {seen}) can turn subnormal "
            f"over a long run where gradients stay zero (ReLU units that stop firing, embedding rows no batch reaches), "
            f"and on this CPU a step then costs {per_value_ns:.1f} ns more per such value (timed on a copy of the "
            f"optimizer): up to {format_duration(added_s)} a step ({added_s / step_s:.0%}), "
            f"{format_duration(added_s * total_steps)} over the run, in the band's high end, not in the estimate; "
            "--flush-denormal (on profile and run) removes it")
    return added_s * total_steps, note
