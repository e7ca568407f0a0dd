"""Runtime estimators of Malta's dissertation, 'Selecting Efficient Virtual Machines for Training Deep Learning Models on the Cloud' (UNICAMP 2021), as plain pure functions.

Source: E. M. Malta, *Selecting Efficient Virtual Machines for Training Deep Learning Models on
the Cloud*, MSc dissertation, UNICAMP, 2021 (interpretations documented below). Every time is a float in seconds.

Notation (dissertation, Chapter 5)::

    T(Init)  time before the first epoch starts (program start-up, multi-GPU set-up)
    T(Ep1)   first epoch          T(Ep2)  any later epoch (stable)
    T(It1)   first iteration      T(It2)  any later iteration (stable)
    T(Val1)  first validation     T(Val2) any later validation (stable)
    N_it     iterations per epoch      N_ep   epochs

Equations implemented:

* Eq. 4.1 (methodology 1): ``T = T(Ep1) + (N_ep - 1) * T(Ep2)``  -> :func:`eq_4_1_total_s`
* Eq. 5.1: ``T = T(Init) + T(Ep1) + (N_ep - 1) * T(Ep2)``        -> :func:`eq_5_1_total_s`
* Eq. 5.2: ``T(E_n) = T(E_n It_1) * N_it + T(Val_n)``              -> :func:`eq_5_2_epoch_s`
* Eq. 5.3: ``T = T(Init) + [T(It1) + T(It2)(N_it - 1) + T(Val1)]
  + (N_ep - 1)[T(It2) N_it + T(Val2)]``                             -> :func:`eq_5_3_total_s`
  (the printed Eq. 5.3 omits T(Init); the text and the published tables include it)
* Eq. 5.4 (validation dropped; the printed double sum read operationally, i.e. the first
  iteration counted once and every other iteration at the steady time):
  ``T = T(Init) + T(It1) + (N_ep * N_it - 1) * T(It2)``             -> :func:`eq_5_4_total_s`
* Table 5.5 variant: Eq. 5.3 with the mean of iterations 2..10 instead of T(It2)
  -> :func:`averaged_iterations_total_s`
* Published error: ``|real - estimate| / estimate``                -> :func:`malta_relative_error`
* Methodology 2 tables: every column divided by its minimum          -> :func:`normalise_by_minimum`

Interpretation of the published tables (checked in ``tests/test_malta_estimators.py``):

* ``N_it``. Operationally the number of iterations per epoch is ``ceil(N_train / global batch)``
  (:func:`iterations_per_epoch`, what Keras/PyTorch run with a partial last batch). The
  dissertation's own estimates (Tables 5.4, 5.5, 5.9) were however computed with the
  *fractional* ratio ``N_train / batch``: seismic Table 5.4/5.5 at batch 2048 (40,512 / 2048 =
  19.78 iterations, 16 epochs) is reproducible within the rounding of the printed inputs only
  with 19.78, neither with 19 nor with 20. The estimators therefore accept any real
  ``iterations_per_epoch >= 1``; pass the integer from :func:`iterations_per_epoch` for a
  real prediction and ``n_train / batch`` to reproduce the thesis.
* ``N_ep``. Table 5.2 uses its own printed epoch column (13/11/12/16); Tables 5.3-5.5 and 5.9
  use Table 5.1 (seismic 13/14/14/16, MNIST 15/17/22/28). Epochs may be fractional (Chapter 4
  uses the *average* number of epochs to stabilise, e.g. 2.7 for CIFAR-10 at batch 256), so
  ``epochs`` is any real ``>= 1``.
* MNIST (Table 5.9) reproduces with the full 60,000-image training set (Keras ``mnist_cnn``
  example: Adadelta, validation on the 10,000 test images), not with the 50,000 the text quotes:
  with 50,000 the batch-256 and batch-512 rows are out of reach for any T(It2) that rounds to
  the printed 0.03 s.
* Validation. The MNIST validation times are not printed; the with/without-validation pairs of
  Table 5.9 imply ``T(Val1) + (N_ep - 1) T(Val2)`` = 10.83 / 6.70 / 5.60 / 4.84 s, i.e. about
  0.72 / 0.39 / 0.25 / 0.17 s per epoch if T(Val1) = T(Val2). Seismic Table 5.3 is *not*
  reproducible with Eq. 5.3 and the stated validation times (0.17-0.18 s first, ~0.2 s later):
  its estimates exceed Table 5.4's by only about T(Val1) + T(Val2), i.e. the later-epoch
  validation was counted once instead of ``N_ep - 1`` times.

Everything here is deterministic and uses only the standard library; invalid inputs raise
``ValueError`` naming the offending argument.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

__all__ = [
    "averaged_iterations_total_s",
    "eq_4_1_total_s",
    "eq_5_1_total_s",
    "eq_5_2_epoch_s",
    "eq_5_3_total_s",
    "eq_5_4_total_s",
    "iterations_per_epoch",
    "malta_relative_error",
    "normalise_by_minimum",
]


# --------------------------------------------------------------------------- validation


def _real(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite real number (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def _time_s(name: str, value: object) -> float:
    """A duration in seconds: finite and >= 0."""
    result = _real(name, value)
    if result < 0.0:
        raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    return result


def _at_least_one(name: str, value: object) -> float:
    """A count that may be fractional (average epochs, N_train / batch) but must be >= 1."""
    result = _real(name, value)
    if result < 1.0:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return result


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


# --------------------------------------------------------------------------- estimators


def iterations_per_epoch(n_train: int, global_batch: int) -> int:
    """Number of iterations per epoch, ``N_it = ceil(n_train / global_batch)``.

    The global batch is the batch summed over all GPUs (one optimiser step). The last partial
    batch counts as an iteration. Used by Eqs. 5.2-5.4. Note that the dissertation's published
    estimates use the unrounded ratio ``n_train / global_batch`` (see the module docstring).

    Raises ValueError if either argument is not a positive int.
    """
    n = _positive_int("n_train", n_train)
    b = _positive_int("global_batch", global_batch)
    return -(-n // b)


def eq_4_1_total_s(first_epoch_s: float, later_epoch_s: float, epochs: float) -> float:
    """Eq. 4.1 (methodology 1): ``T = T(Ep1) + (N_ep - 1) * T(Ep2)``.

    ``first_epoch_s`` = T(Ep1), ``later_epoch_s`` = T(Ep2) (the second epoch, or the average
    later epoch), ``epochs`` = N_ep >= 1 (may be an average, hence fractional).
    """
    t_ep1 = _time_s("first_epoch_s", first_epoch_s)
    t_ep2 = _time_s("later_epoch_s", later_epoch_s)
    n_ep = _at_least_one("epochs", epochs)
    return t_ep1 + (n_ep - 1.0) * t_ep2


def eq_5_1_total_s(
    init_s: float, first_epoch_s: float, later_epoch_s: float, epochs: float
) -> float:
    """Eq. 5.1: ``T = T(Init) + T(Ep1) + (N_ep - 1) * T(Ep2)``.

    Eq. 4.1 plus the initialisation time (everything before the first epoch starts).
    Reproduces Table 5.2 exactly, e.g. 0.18 + 13.69 + 12 * 11.05 = 146.47 s.
    """
    t_init = _time_s("init_s", init_s)
    return t_init + eq_4_1_total_s(first_epoch_s, later_epoch_s, epochs)


def eq_5_2_epoch_s(
    first_iteration_s: float, iterations_per_epoch: float, validation_s: float
) -> float:
    """Eq. 5.2: time of epoch n, ``T(E_n) = T(E_n It_1) * N_it + T(Val_n)``.

    ``first_iteration_s`` is the (stable) iteration time of that epoch, ``iterations_per_epoch``
    is N_it >= 1, ``validation_s`` is T(Val_n).
    """
    t_it = _time_s("first_iteration_s", first_iteration_s)
    n_it = _at_least_one("iterations_per_epoch", iterations_per_epoch)
    t_val = _time_s("validation_s", validation_s)
    return t_it * n_it + t_val


def eq_5_3_total_s(
    init_s: float,
    first_iteration_s: float,
    steady_iteration_s: float,
    iterations_per_epoch: float,
    epochs: float,
    first_validation_s: float,
    later_validation_s: float,
) -> float:
    """Eq. 5.3 with T(Init) (Section 5.2)::

        T = T(Init)
          + [T(It1) + T(It2) * (N_it - 1) + T(Val1)]          # first epoch
          + (N_ep - 1) * [T(It2) * N_it + T(Val2)]             # every later epoch

    Only the first iteration and the first validation differ from the steady state. The printed
    equation omits T(Init) although the text says to add it and the published tables include it.
    With both validation times zero this equals :func:`eq_5_4_total_s` (the dissertation's
    Table 5.4 is "Eq. 5.3 without the validation time").
    """
    t_init = _time_s("init_s", init_s)
    t_it1 = _time_s("first_iteration_s", first_iteration_s)
    t_it2 = _time_s("steady_iteration_s", steady_iteration_s)
    n_it = _at_least_one("iterations_per_epoch", iterations_per_epoch)
    n_ep = _at_least_one("epochs", epochs)
    t_val1 = _time_s("first_validation_s", first_validation_s)
    t_val2 = _time_s("later_validation_s", later_validation_s)
    first_epoch = t_it1 + t_it2 * (n_it - 1.0) + t_val1
    later_epoch = t_it2 * n_it + t_val2
    return t_init + first_epoch + (n_ep - 1.0) * later_epoch


def eq_5_4_total_s(
    init_s: float,
    first_iteration_s: float,
    steady_iteration_s: float,
    iterations_per_epoch: float,
    epochs: float,
) -> float:
    """Eq. 5.4 (methodology 2, validation dropped), operational form::

        T = T(Init) + T(It1) + (N_ep * N_it - 1) * T(It2)

    The printed equation, ``T(Init) + T(It1) + sum_{m=1}^{N_ep} sum_{n=1}^{N_it} T(It_n)``, is
    read as: the first iteration is paid once at T(It1) and each of the remaining
    ``N_ep * N_it - 1`` iterations at the steady T(It2) (this is what reproduces Tables 5.4
    and 5.9).
    """
    t_init = _time_s("init_s", init_s)
    t_it1 = _time_s("first_iteration_s", first_iteration_s)
    t_it2 = _time_s("steady_iteration_s", steady_iteration_s)
    n_it = _at_least_one("iterations_per_epoch", iterations_per_epoch)
    n_ep = _at_least_one("epochs", epochs)
    return t_init + t_it1 + (n_ep * n_it - 1.0) * t_it2


def averaged_iterations_total_s(
    init_s: float,
    first_iteration_s: float,
    iterations_2_to_10_s: Sequence[float],
    iterations_per_epoch: float,
    epochs: float,
    first_validation_s: float = 0.0,
    later_validation_s: float = 0.0,
) -> float:
    """Eq. 5.3 with the mean of iterations 2 to 10 replacing T(It2) (Table 5.5).

    The dissertation averages ``sum_{i=2}^{10} T(E_1 It_i) / 9`` to dilute the distortion of a
    single iteration. Any non-empty sequence of post-first iteration times is accepted (nine in
    the dissertation). With the default zero validation times this is the Eq. 5.4 form.
    """
    if isinstance(iterations_2_to_10_s, (str, bytes)) or not isinstance(
        iterations_2_to_10_s, Sequence
    ):
        raise ValueError(
            f"iterations_2_to_10_s must be a sequence of times, got {iterations_2_to_10_s!r}"
        )
    if len(iterations_2_to_10_s) == 0:
        raise ValueError("iterations_2_to_10_s must contain at least one iteration time")
    times = [
        _time_s(f"iterations_2_to_10_s[{i}]", t) for i, t in enumerate(iterations_2_to_10_s)
    ]
    mean_s = statistics.fmean(times)
    return eq_5_3_total_s(
        init_s,
        first_iteration_s,
        mean_s,
        iterations_per_epoch,
        epochs,
        first_validation_s,
        later_validation_s,
    )


def malta_relative_error(real_s: float, estimated_s: float) -> float:
    """The dissertation's error convention: ``|real - estimate| / estimate`` (a fraction).

    Note the denominator is the *estimate*, e.g. Table 5.5, batch 256:
    |195.85 - 151.7| / 151.7 = 0.291 (29.1 %). Multiply by 100 for the printed percentages.
    Raises ValueError if ``estimated_s`` is not > 0.
    """
    real = _time_s("real_s", real_s)
    est = _time_s("estimated_s", estimated_s)
    if est == 0.0:
        raise ValueError("estimated_s must be > 0 (it is the denominator)")
    return abs(real - est) / est


def normalise_by_minimum(values: Mapping[str, float]) -> dict[str, float]:
    """Methodology 2 normalised table column: every value divided by the column minimum.

    The best (fastest or cheapest) entry becomes 1.00 and the others tell how many times worse
    they are (Tables 5.6-5.13). Keys keep their order. Values must be finite and > 0.
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"values must be a mapping of name -> value, got {values!r}")
    if len(values) == 0:
        raise ValueError("values must not be empty")
    checked: dict[str, float] = {}
    for key, value in values.items():
        v = _real(f"values[{key!r}]", value)
        if v <= 0.0:
            raise ValueError(f"values[{key!r}] must be > 0, got {value!r}")
        checked[key] = v
    minimum = min(checked.values())
    return {key: v / minimum for key, v in checked.items()}
