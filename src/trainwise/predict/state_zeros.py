"""How a job's steps speed up as training fills in its optimizer state's zeros (modelled).

Background (benchmarks/results/sqrt_zeros.json): torch's CPU square root of a zero costs ~13x that of
a normal float here, and Adam's exp_avg_sq (RMSprop's square_avg, Adagrad's sum) is zero in every
embedding row no batch has touched yet. So an embedding model's steps get faster while training
touches new rows — mostly after a short profile has ended (rnn_sa_lstm batch 16: aten::sqrt 7.9 →
3.5 ms/step between steps 20-59 and 340-379).

The profile counts the zeros after steps about 1.5x apart (`OptimizerStateZeros.trajectory`). Each
element is touched at a rate of its own (its row's token frequency, dropout), so the zeros decay as a
mixture of exponentials; a stretched exponential, zeros(s) = Z·exp(−(s/τ)^κ) over the Z elements of the
tensors that had zeros, is fitted to the counted points (least squares of ln(−ln(z/Z)) on ln s; κ kept
in (0, 1.5]). Checked on rnn_sa_lstm batch 16 (8,000 reviews, 3 epochs, one full run counting to step
1,478): fitted to the counts up to step 25 (κ 0.75, τ 138 steps) it predicts 1.00 M / 0.52 M / 0.18 M /
28 k zeros at steps 128 / 256 / 512 / 1,024 against 0.95 M / 0.47 M / 0.14 M / 23 k counted; Heaps' law
for the touched elements (K·s^β) fitted to the same points had the state full by step 186.
The cost of the state's square root above that of normal floats is modelled per element as
a·p + b·p·(1 − p) at zero fraction p: a from the square root of all zeros measured here, b from that
of the state as it was when sampling stopped (branch mispredictions make a mix cost more per zero
than all zeros). Expected error: the law is fitted to a short profile's counts only and the mix term
is one measured point, so the prediction keeps half the correction in its band.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainwise.profile.schema import OptimizerStateZeros

MIN_POINTS = 3  # counted points after the first step needed to fit K and β


@dataclass(frozen=True)
class ZeroFill:
    """zeros(s) = sparse_elements · exp(−(s/tau_steps)^kappa) in the sparse state tensors."""

    sparse_elements: int
    tau_steps: float
    kappa: float
    zero_ns: float  # a: excess square-root cost per element of an all-zero state, ns
    mix_ns: float  # b: extra per element at a mix, ns
    points: int

    def zeros_at(self, steps: np.ndarray | float) -> np.ndarray:
        return self.sparse_elements * np.exp(-np.power(np.maximum(steps, 0.0) / self.tau_steps, self.kappa))

    def excess_s(self, steps: np.ndarray | float) -> np.ndarray:
        """Per-step square-root time above that of a state with no zeros, at `steps` optimizer steps."""
        p = self.zeros_at(steps) / self.sparse_elements
        return self.sparse_elements * (self.zero_ns * p + self.mix_ns * p * (1 - p)) * 1e-9


MAX_KAPPA = 1.5
# A slope under this is no decay (counts flat within rounding): nothing to extrapolate
MIN_KAPPA = 0.05


def fit(zeros: OptimizerStateZeros) -> ZeroFill | None:
    """The fill-in law from a profile's counts; None when they do not support one."""
    sparse = zeros.sparse_elements
    if (not sparse or zeros.sqrt_zero_ns_per_element is None or zeros.sqrt_normal_ns_per_element is None
            or zeros.sqrt_state_ns_per_element is None):
        return None
    points = [(s, z) for s, z in zeros.trajectory if s >= 2]
    if zeros.steps is not None and zeros.steps >= 2 and all(s != zeros.steps for s, _ in points):
        points.append((zeros.steps, zeros.zeros))
    points.sort()
    usable = [(s, z) for s, z in points if 0 < z < sparse]
    if len(usable) < MIN_POINTS:
        return None
    x = np.log([s for s, _ in usable])
    y = np.log(-np.log(np.array([z for _, z in usable], dtype="float64") / sparse))
    kappa, intercept = np.polyfit(x, y, 1)
    if not (math.isfinite(kappa) and math.isfinite(intercept)) or kappa < MIN_KAPPA:
        return None  # the zeros are not going away: nothing to extrapolate
    kappa = min(float(kappa), MAX_KAPPA)
    intercept = float(np.mean(y - kappa * x))  # refit with κ clipped
    if -intercept / kappa > 700:
        return None  # a decay too slow to matter in any run (τ beyond e^700 steps)
    tau = math.exp(-intercept / kappa)
    zero_ns = max(0.0, zeros.sqrt_zero_ns_per_element - zeros.sqrt_normal_ns_per_element)
    p_now = usable[-1][1] / sparse
    # the state's measured excess per element, over the sparse tensors (the timed ones first)
    state_excess_ns = max(0.0, zeros.sqrt_state_ns_per_element - zeros.sqrt_normal_ns_per_element) * zeros.elements / sparse
    mix_ns = max(0.0, (state_excess_ns - zero_ns * p_now) / (p_now * (1 - p_now)))
    return ZeroFill(sparse_elements=sparse, tau_steps=tau, kappa=kappa, zero_ns=zero_ns, mix_ns=mix_ns, points=len(usable))


def window_excess_s(model: ZeroFill, window: tuple[int, int]) -> float:
    """The modelled square-root excess per step, averaged over the measured steps in `window`."""
    first, last = max(1, window[0]), max(window[0], window[1])
    return float(np.mean(model.excess_s(np.arange(first, last + 1, dtype="float64"))))


def iterations_correction_s(model: ZeroFill, total_steps: int, window: tuple[int, int]) -> float:
    """Seconds to add to (total_steps × the step measured over the steps in `window`): the run's modelled
    square-root excess minus what the measured window carried, step by step."""
    in_window = window_excess_s(model, window)
    steps = np.arange(1, total_steps + 1, dtype="float64") if total_steps <= 2_000_000 else np.linspace(1, total_steps, 2_000_000)
    over_run = float(np.mean(model.excess_s(steps))) * total_steps
    return over_run - total_steps * in_window
