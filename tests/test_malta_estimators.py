"""Malta's runtime estimators (trainwise.predict.malta) against the dissertation's tables.

Source: E. M. Malta, *Selecting Efficient Virtual Machines for Training Deep Learning Models on the Cloud*,
MSc dissertation, UNICAMP, 2021.

"Within the rounding of the printed inputs" is made precise with interval arithmetic: every
printed number is kept as a string, and stands for the interval of half a unit of its last digit
(``"0.08"`` -> [0.075, 0.085], ``"14.0"`` -> [13.95, 14.05]). All estimators are non-decreasing in
every time argument (checked by the property tests below), so an estimate's interval is the
estimator evaluated at all-low and all-high inputs. A published estimate is reproduced when its
own rounding interval meets that interval. No tolerance is widened beyond this.

Interpretations established here (see also the module docstring of trainwise.predict.malta):

* N_it in the published estimates is the fractional ratio N_train / batch (40,512 / b for the
  seismic set, 60,000 / b for MNIST), not ceil() -- the seismic 2048 row rules out 19 and 20.
* N_ep is Table 5.2's own epoch column for Table 5.2 (13/11/12/16), and Table 5.1 for
  Tables 5.3-5.5 (13/14/14/16) and Table 5.9 (15/17/22/28).
* MNIST uses the full 60,000 training images (the text's "50,000" cannot reproduce Table 5.9).
* Printed typos: Table 5.4 batch 2048 real time "241.7" is Table 5.5's estimate copied over;
  Tables 5.3/5.5 and the Table 5.4 error (1.99 %) give 248.5. Table 5.9 batch 256 real time
  "167.17" is the estimate copied over; both published errors (0.14 %, 7.07 %) give 167.40.
* Table 5.4's error column divides by the real time, unlike every other table (the
  |real - est| / est convention, implemented by malta_relative_error).
* Table 5.3 is not reproducible with Eq. 5.3 and the stated validation times (see its test).
* Table 5.9's validation times are not printed: they are implied by the with/without pairs.
"""

from __future__ import annotations

import itertools
import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwise.predict.malta import (
    averaged_iterations_total_s,
    eq_4_1_total_s,
    eq_5_1_total_s,
    eq_5_2_epoch_s,
    eq_5_3_total_s,
    eq_5_4_total_s,
    iterations_per_epoch,
    malta_relative_error,
    normalise_by_minimum,
)

SEISMIC_N_TRAIN = 40_512  # Section 4.2: "training/validation dataset contains 40,512/212 images"
MNIST_N_TRAIN = 60_000  # full MNIST training set (see test_table_5_9_needs_60000_training_images)
MNIST_N_VAL = 10_000

# Table 5.1: epochs per batch size (used by Tables 5.3-5.5 and 5.9).
SEISMIC_EPOCHS = {256: 13, 512: 14, 1024: 14, 2048: 16}
MNIST_EPOCHS = {256: 15, 512: 17, 1024: 22, 2048: 28}


# --------------------------------------------------------------------------- helpers


def _p(printed: str) -> tuple[float, float, float]:
    """A printed number -> (value, low, high): half a unit of its last printed digit."""
    d = Decimal(printed)
    half = Decimal(1).scaleb(d.as_tuple().exponent) / 2
    return float(d), float(d - half), float(d + half)


def _interval(f, times: dict[str, str], exact: dict[str, float]) -> tuple[float, float]:
    """[f(all printed times low), f(all printed times high)] with the counts held exact."""
    low = f(**{k: _p(v)[1] for k, v in times.items()}, **exact)
    high = f(**{k: _p(v)[2] for k, v in times.items()}, **exact)
    return low, high


def _meets(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] + 1e-12 and b[0] <= a[1] + 1e-12


def _published_interval(printed: str) -> tuple[float, float]:
    _, lo, hi = _p(printed)
    return lo, hi


def _error_pct_interval(real: str, est: str, denominator: str) -> tuple[float, float]:
    """Range of 100*|real-est|/den over the rounding boxes of real and est."""
    _, r_lo, r_hi = _p(real)
    _, e_lo, e_hi = _p(est)
    values = []
    for r, e in itertools.product((r_lo, r_hi), (e_lo, e_hi)):
        den = e if denominator == "estimate" else r
        values.append(100.0 * abs(r - e) / den)
    low = 0.0 if _meets((r_lo, r_hi), (e_lo, e_hi)) else min(values)
    return low, max(values)


def _assert_error_reproduced(real: str, est: str, published_pct: str, denominator="estimate"):
    interval = _error_pct_interval(real, est, denominator)
    assert _meets(interval, _published_interval(published_pct)), (
        f"error {published_pct}% not in {interval} for real={real} est={est} (/{denominator})"
    )


def _implied_steady_iteration_s(est: str, init: str, it1: str, n_it: float, n_ep: int) -> float:
    """Invert Eq. 5.4 for T(It2) at the printed (nominal) values."""
    return (_p(est)[0] - _p(init)[0] - _p(it1)[0]) / (n_ep * n_it - 1.0)


# --------------------------------------------------------------------------- Table 5.2

# batch: (first epoch, average epoch, init, epochs, real, published estimate, published error %)
TABLE_5_2 = {
    256: ("13.69", "11.05", "0.18", 13, "148.15", "146.47", "1.15"),
    512: ("14.22", "9.96", "0.19", 11, "116.86", "114.01", "2.5"),
    1024: ("18.95", "10.05", "0.20", 12, "132.73", "129.7", "2.34"),
    2048: ("33.06", "15.6", "0.19", 16, "268.75", "267.25", "0.56"),
}


@pytest.mark.parametrize("batch", sorted(TABLE_5_2))
def test_table_5_2_eq_5_1_exact(batch):
    """Table 5.2 (captioned Eq. 4.1) is Eq. 5.1 with the "average epoch" column as T(Ep2) and
    the table's own epoch column (13/11/12/16, not Table 5.1's 13/14/14/16). Exact."""
    first, avg, init, epochs, _real, est, _err = TABLE_5_2[batch]
    got = eq_5_1_total_s(_p(init)[0], _p(first)[0], _p(avg)[0], epochs)
    assert got == pytest.approx(_p(est)[0], abs=1e-9)
    # Eq. 5.1 is Eq. 4.1 plus T(Init).
    assert got == pytest.approx(_p(init)[0] + eq_4_1_total_s(_p(first)[0], _p(avg)[0], epochs))
    # The printed caption's Eq. 4.1 alone (no T(Init)) misses by exactly T(Init).
    assert eq_4_1_total_s(_p(first)[0], _p(avg)[0], epochs) != pytest.approx(_p(est)[0], abs=0.01)


@pytest.mark.parametrize("batch", sorted(TABLE_5_2))
def test_table_5_2_errors_exact(batch):
    *_, real, est, err = TABLE_5_2[batch]
    pct = 100.0 * malta_relative_error(_p(real)[0], _p(est)[0])
    decimals = -Decimal(err).as_tuple().exponent
    assert round(pct, decimals) == pytest.approx(_p(err)[0], abs=1e-12)


# --------------------------------------------------------------------------- Tables 5.3-5.5

# batch: (init, first it., second it., real, published estimate, published error %)
TABLE_5_4 = {
    256: ("0.63", "14.0", "0.08", "195.85", "170.3", "13.05"),
    512: ("0.19", "3.41", "0.13", "145.67", "148.6", "1.99"),
    1024: ("0.20", "5.62", "0.25", "148.0", "144.0", "2.70"),
    # Real time printed as "241.7": a typo (Table 5.5's 2048 estimate); Tables 5.3/5.5 give
    # 248.5 and only 248.5 reproduces the printed 1.99 % (see test_table_5_4_errors...).
    2048: ("0.18", "10.2", "0.74", "248.5", "243.5", "1.99"),
}
# batch: (init, first it., average of iterations 2..10, real, published estimate, error %)
TABLE_5_5 = {
    256: ("0.63", "14.0", "0.067", "195.85", "151.7", "29.1"),
    512: ("0.19", "3.41", "0.126", "145.67", "142.5", "2.19"),
    1024: ("0.20", "5.62", "0.249", "148.0", "143.4", "3.22"),
    2048: ("0.18", "10.2", "0.733", "248.5", "241.7", "2.78"),
}
# batch: (init, first it., second it., real, published estimate, error %); validation stated in
# the text: first 0.17 s (256, 512) / 0.18 s (1024, 2048), later "approximately 0.2" s.
TABLE_5_3 = {
    256: ("0.63", "14.0", "0.08", "195.85", "170.6", "14.8", "0.17"),
    512: ("0.19", "3.41", "0.13", "145.67", "148.95", "2.20", "0.17"),
    1024: ("0.20", "5.62", "0.25", "148.0", "144.4", "2.51", "0.18"),
    2048: ("0.18", "10.2", "0.74", "248.5", "243.95", "1.85", "0.18"),
}
LATER_VALIDATION_SEISMIC = "0.2"


def _seismic_n_it(batch: int) -> float:
    return SEISMIC_N_TRAIN / batch


@pytest.mark.parametrize("batch", sorted(TABLE_5_4))
def test_table_5_4_eq_5_4_within_rounding(batch):
    init, it1, it2, _real, est, _err = TABLE_5_4[batch]
    n_it, n_ep = _seismic_n_it(batch), SEISMIC_EPOCHS[batch]
    interval = _interval(
        eq_5_4_total_s,
        {"init_s": init, "first_iteration_s": it1, "steady_iteration_s": it2},
        {"iterations_per_epoch": n_it, "epochs": n_ep},
    )
    assert _meets(interval, _published_interval(est)), (interval, est)
    # The unrounded T(It2) behind the published estimate rounds to the printed one.
    implied = _implied_steady_iteration_s(est, init, it1, n_it, n_ep)
    _, lo, hi = _p(it2)
    assert lo <= implied <= hi, implied
    # ...and with it Eq. 5.4 (and Eq. 5.3 without validation) gives the published number.
    back = eq_5_4_total_s(_p(init)[0], _p(it1)[0], implied, n_it, n_ep)
    assert back == pytest.approx(_p(est)[0], abs=1e-9)
    assert eq_5_3_total_s(_p(init)[0], _p(it1)[0], implied, n_it, n_ep, 0.0, 0.0) == (
        pytest.approx(back, rel=1e-12)
    )


@pytest.mark.parametrize("n_it", [19, 20, iterations_per_epoch(SEISMIC_N_TRAIN, 2048)])
def test_table_5_4_batch_2048_rules_out_integer_iterations(n_it):
    """Why N_it = N_train / batch (19.78) and not ceil (20) or floor (19): with an integer the
    2048 rows of Tables 5.4 and 5.5 are out of reach of the printed inputs."""
    for table in (TABLE_5_4, TABLE_5_5):
        init, it1, it2, _real, est, _err = table[2048]
        interval = _interval(
            eq_5_4_total_s,
            {"init_s": init, "first_iteration_s": it1, "steady_iteration_s": it2},
            {"iterations_per_epoch": n_it, "epochs": SEISMIC_EPOCHS[2048]},
        )
        assert not _meets(interval, _published_interval(est)), (n_it, interval, est)


@pytest.mark.parametrize("batch", [512, 1024])
def test_tables_5_4_5_5_use_table_5_1_epochs(batch):
    """Tables 5.3-5.5 use Table 5.1's epochs (14 for 512/1024), not Table 5.2's (11/12)."""
    init, it1, it2, _real, est, _err = TABLE_5_4[batch]
    table_5_2_epochs = TABLE_5_2[batch][3]
    interval = _interval(
        eq_5_4_total_s,
        {"init_s": init, "first_iteration_s": it1, "steady_iteration_s": it2},
        {"iterations_per_epoch": _seismic_n_it(batch), "epochs": table_5_2_epochs},
    )
    assert not _meets(interval, _published_interval(est))


@pytest.mark.parametrize("batch", sorted(TABLE_5_4))
def test_table_5_4_errors_divide_by_the_real_time(batch):
    """Table 5.4 alone divides by the real time (13.05 % = 25.55 / 195.85). The dissertation's
    convention |real - est| / est gives 15.0 % for batch 256 and is not what is printed."""
    _init, _it1, _it2, real, est, err = TABLE_5_4[batch]
    _assert_error_reproduced(real, est, err, denominator="real")
    if batch == 256:
        interval = _error_pct_interval(real, est, "estimate")
        assert not _meets(interval, _published_interval(err))
        assert 100 * malta_relative_error(195.85, 170.3) == pytest.approx(15.003, abs=1e-3)


def test_table_5_4_batch_2048_printed_real_time_is_a_typo():
    """With the printed real time 241.7 neither error convention gives the printed 1.99 %."""
    for denominator in ("estimate", "real"):
        interval = _error_pct_interval("241.7", "243.5", denominator)
        assert not _meets(interval, _published_interval("1.99"))


@pytest.mark.parametrize("batch", sorted(TABLE_5_5))
def test_table_5_5_averaged_iterations_within_rounding(batch):
    """Table 5.5: Eq. 5.3 without validation, T(It2) replaced by the mean of iterations 2..10.
    Only the mean is printed, so nine equal values stand for the nine iterations."""
    init, it1, avg, _real, est, _err = TABLE_5_5[batch]
    n_it, n_ep = _seismic_n_it(batch), SEISMIC_EPOCHS[batch]

    def f(init_s, first_iteration_s, mean_s, **counts):
        return averaged_iterations_total_s(init_s, first_iteration_s, [mean_s] * 9, **counts)

    interval = _interval(
        f,
        {"init_s": init, "first_iteration_s": it1, "mean_s": avg},
        {"iterations_per_epoch": n_it, "epochs": n_ep},
    )
    assert _meets(interval, _published_interval(est)), (interval, est)
    implied = _implied_steady_iteration_s(est, init, it1, n_it, n_ep)
    _, lo, hi = _p(avg)
    assert lo <= implied <= hi, implied


@pytest.mark.parametrize("batch", sorted(TABLE_5_5))
def test_table_5_5_errors(batch):
    _init, _it1, _avg, real, est, err = TABLE_5_5[batch]
    _assert_error_reproduced(real, est, err)
    if batch == 256:  # the dissertation's batch-256 example
        assert 100 * malta_relative_error(195.85, 151.7) == pytest.approx(29.10, abs=0.005)


@pytest.mark.parametrize("batch", sorted(TABLE_5_3))
def test_table_5_3_errors(batch):
    _init, _it1, _it2, real, est, err, _val1 = TABLE_5_3[batch]
    _assert_error_reproduced(real, est, err)


@pytest.mark.parametrize("batch", sorted(TABLE_5_3))
def test_table_5_3_counts_later_validation_once(batch):
    """Table 5.3 (Eq. 5.3 with validation) is NOT reproducible from the printed inputs.

    Eq. 5.3 adds T(Val1) + (N_ep - 1) T(Val2) ~ 2.6-3.2 s of validation to the Eq. 5.4 estimate
    of Table 5.4 (same init / first / second iteration columns), but the published Table 5.3
    estimates exceed Table 5.4's by only 0.3 / 0.35 / 0.4 / 0.45 s, i.e. T(Val1) + T(Val2):
    the later-epoch validation was added once instead of N_ep - 1 times (missing brackets).
    For batches 256 and 2048 even the low corner of the printed inputs under Eq. 5.3 overshoots
    the published estimate. The closest faithful reproduction asserted here:
      * the published gap equals T(Val1) + T(Val2) within rounding,
      * it does not equal Eq. 5.3's T(Val1) + (N_ep - 1) T(Val2),
      * Eq. 5.3 with Table 5.4's implied T(It2) = Table 5.4 + T(Val1) + (N_ep - 1) T(Val2).
    ("approximately 0.2" s is read as one printed decimal, [0.15, 0.25].)
    """
    init, it1, it2, _real, est_53, _err, val1 = TABLE_5_3[batch]
    est_54 = TABLE_5_4[batch][4]
    n_it, n_ep = _seismic_n_it(batch), SEISMIC_EPOCHS[batch]
    _, v1_lo, v1_hi = _p(val1)
    _, v2_lo, v2_hi = _p(LATER_VALIDATION_SEISMIC)
    gap = (_p(est_53)[1] - _p(est_54)[2], _p(est_53)[2] - _p(est_54)[1])
    assert _meets(gap, (v1_lo + v2_lo, v1_hi + v2_hi)), gap
    assert not _meets(gap, (v1_lo + (n_ep - 1) * v2_lo, v1_hi + (n_ep - 1) * v2_hi))

    eq_53 = _interval(
        eq_5_3_total_s,
        {
            "init_s": init,
            "first_iteration_s": it1,
            "steady_iteration_s": it2,
            "first_validation_s": val1,
            "later_validation_s": LATER_VALIDATION_SEISMIC,
        },
        {"iterations_per_epoch": n_it, "epochs": n_ep},
    )
    if batch in (256, 2048):
        assert not _meets(eq_53, _published_interval(est_53)), eq_53
    else:
        assert _meets(eq_53, _published_interval(est_53)), eq_53

    it2_implied = _implied_steady_iteration_s(est_54, init, it1, n_it, n_ep)
    ours = eq_5_3_total_s(
        _p(init)[0], _p(it1)[0], it2_implied, n_it, n_ep, _p(val1)[0], 0.2
    )
    assert ours == pytest.approx(_p(est_54)[0] + _p(val1)[0] + (n_ep - 1) * 0.2, abs=1e-9)


# --------------------------------------------------------------------------- Table 5.9

# MNIST on p2.16xlarge. batch: (init, first it., second it., published estimate with
# validation (Eq. 5.3), without (Eq. 5.4), error % with, error % without)
TABLE_5_9 = {
    256: ("23.2", "23.3", "0.03", "167.17", "156.34", "0.14", "7.07"),
    512: ("6.94", "21.6", "0.03", "95.77", "89.07", "3.79", "11.59"),
    1024: ("6.93", "21.6", "0.04", "81.53", "75.93", "2.04", "9.57"),
    2048: ("6.92", "21.7", "0.05", "72.94", "68.1", "3.65", "11.0"),
}
# Real times; for 256 the printed "167.17" is the estimate copied into the real column: the
# published errors 0.14 % and 7.07 % both give 167.40 (test_table_5_9_batch_256_real_time).
TABLE_5_9_REAL = {256: "167.40", 512: "99.4", 1024: "83.2", 2048: "75.6"}


def _mnist_n_it(batch: int, n_train: int = MNIST_N_TRAIN) -> float:
    return n_train / batch


@pytest.mark.parametrize("batch", sorted(TABLE_5_9))
def test_table_5_9_without_validation_eq_5_4(batch):
    """Eq. 5.4 with N_it = 60,000 / batch and Table 5.1 epochs (15/17/22/28)."""
    init, it1, it2, _with, without, _e1, _e2 = TABLE_5_9[batch]
    n_it, n_ep = _mnist_n_it(batch), MNIST_EPOCHS[batch]
    interval = _interval(
        eq_5_4_total_s,
        {"init_s": init, "first_iteration_s": it1, "steady_iteration_s": it2},
        {"iterations_per_epoch": n_it, "epochs": n_ep},
    )
    assert _meets(interval, _published_interval(without)), (interval, without)
    implied = _implied_steady_iteration_s(without, init, it1, n_it, n_ep)
    _, lo, hi = _p(it2)
    assert lo <= implied <= hi, implied
    # ceil(60,000 / batch) = 235/118/59/30 is also within the rounding of the 2-decimal T(It2).
    interval_ceil = _interval(
        eq_5_4_total_s,
        {"init_s": init, "first_iteration_s": it1, "steady_iteration_s": it2},
        {"iterations_per_epoch": iterations_per_epoch(MNIST_N_TRAIN, batch), "epochs": n_ep},
    )
    assert _meets(interval_ceil, _published_interval(without))


@pytest.mark.parametrize("batch", [256, 512])
def test_table_5_9_needs_60000_training_images(batch):
    """With the 50,000 training images quoted in Section 5.4 (fractional or ceil N_it) the
    batch 256 and 512 rows cannot be reached by any T(It2) that rounds to the printed 0.03 s."""
    init, it1, it2, _with, without, _e1, _e2 = TABLE_5_9[batch]
    for n_it in (_mnist_n_it(batch, 50_000), iterations_per_epoch(50_000, batch)):
        interval = _interval(
            eq_5_4_total_s,
            {"init_s": init, "first_iteration_s": it1, "steady_iteration_s": it2},
            {"iterations_per_epoch": n_it, "epochs": MNIST_EPOCHS[batch]},
        )
        assert not _meets(interval, _published_interval(without)), (n_it, interval)


def test_table_5_9_needs_init_time():
    """T(Init) must be added (the text and tables do; the printed Eq. 5.3 omits it): without the 23.2 s the batch 256 row is out of reach."""
    init, it1, it2, _with, without, _e1, _e2 = TABLE_5_9[256]
    interval = _interval(
        eq_5_4_total_s,
        {"first_iteration_s": it1, "steady_iteration_s": it2},
        {"init_s": 0.0, "iterations_per_epoch": _mnist_n_it(256), "epochs": MNIST_EPOCHS[256]},
    )
    assert not _meets(interval, _published_interval(without))


@pytest.mark.parametrize("batch", sorted(TABLE_5_9))
def test_table_5_9_with_validation_eq_5_3(batch):
    """Eq. 5.3 with T(Init) and validation: 167.17 / 95.77 / 81.53 / 72.94.

    The MNIST validation times are not printed anywhere, so these estimates are not reproducible
    from printed inputs alone. Eq. 5.3 minus Eq. 5.4 is exactly T(Val1) + (N_ep - 1) T(Val2);
    the published pairs imply 10.83 / 6.70 / 5.60 / 4.84 s of validation in total, i.e.
    0.722 / 0.394 / 0.255 / 0.173 s per epoch when T(Val1) = T(Val2) (the only reading the
    table allows; the split between first and later validations is not identifiable). The
    closest faithful reproduction asserted here:
      * Eq. 5.3 with the implied T(It2) and those implied validation times gives the published
        with-validation estimate (so the same T(Init), T(It1), T(It2), N_it, N_ep serve both rows);
      * the implied validation times are physically plausible: positive, decreasing with the
        batch size, and below the time of training on as many samples (10,000 validation images
        forward-only vs 60,000 training images forward+backward: < 1/6 of an epoch's training).
    """
    init, it1, _it2, with_val, without, _e1, _e2 = TABLE_5_9[batch]
    n_it, n_ep = _mnist_n_it(batch), MNIST_EPOCHS[batch]
    it2 = _implied_steady_iteration_s(without, init, it1, n_it, n_ep)
    validation_total = _p(with_val)[0] - _p(without)[0]
    per_epoch_val = validation_total / n_ep
    got = eq_5_3_total_s(_p(init)[0], _p(it1)[0], it2, n_it, n_ep, per_epoch_val, per_epoch_val)
    assert got == pytest.approx(_p(with_val)[0], abs=1e-9)
    assert 0.0 < per_epoch_val < (MNIST_N_VAL / MNIST_N_TRAIN) * eq_5_2_epoch_s(it2, n_it, 0.0)


def test_table_5_9_implied_validation_decreases_with_batch():
    per_epoch = []
    for batch in sorted(TABLE_5_9):
        _init, _it1, _it2, with_val, without, _e1, _e2 = TABLE_5_9[batch]
        per_epoch.append((_p(with_val)[0] - _p(without)[0]) / MNIST_EPOCHS[batch])
    assert per_epoch == sorted(per_epoch, reverse=True)
    assert per_epoch == pytest.approx([0.722, 0.394, 0.2545, 0.1729], abs=5e-4)


@pytest.mark.parametrize("batch", sorted(TABLE_5_9))
def test_table_5_9_errors(batch):
    _init, _it1, _it2, with_val, without, err_with, err_without = TABLE_5_9[batch]
    real = TABLE_5_9_REAL[batch]
    _assert_error_reproduced(real, with_val, err_with)
    _assert_error_reproduced(real, without, err_without)


def test_table_5_9_batch_256_real_time():
    """The printed real time "167.17" equals the estimate (error would be 0 %, not 0.14 %).
    Both printed errors pin the real time to ~167.40 s."""
    assert not _meets(_error_pct_interval("167.17", "167.17", "estimate"), (0.135, 0.145))
    assert not _meets(_error_pct_interval("167.17", "156.34", "estimate"), (7.065, 7.075))
    lows, highs = [], []
    for est, err in (("167.17", "0.14"), ("156.34", "7.07")):
        _, e_lo, e_hi = _p(est)
        _, p_lo, p_hi = _p(err)
        lows.append(e_lo * (1 + p_lo / 100))  # real above the estimate in both rows
        highs.append(e_hi * (1 + p_hi / 100))
    assert max(lows) <= 167.40 <= min(highs)


# --------------------------------------------------------------------------- Table 5.10

# MNIST, batch 256, relative performance (each column divided by its minimum). The absolute
# inputs (T(Init), T(It1), T(It2), validation) of five of the six VMs are not printed -- only
# p2.16xlarge's, in Table 5.9 -- so the table cannot be recomputed from printed inputs. What is
# checked: the published columns are fixed points of normalise_by_minimum (p3.2xlarge = 1.00),
# the rankings, and that the p3.2xlarge estimates implied by our p2.16xlarge estimates and the
# published ratios are affine in the number of epochs, as Eqs. 5.3/5.4 require.
VMS = ("p2.xlarge", "p2.8xlarge", "p2.16xlarge", "p3.2xlarge", "p3.8xlarge", "p3.16xlarge")
TABLE_5_10 = {
    # with validation: 5, 10, 20 epochs, real runtime
    "yes": {
        "p2.xlarge": ("2.79", "3.23", "3.57", "2.58"),
        "p2.8xlarge": ("3.84", "3.41", "3.07", "2.24"),
        "p2.16xlarge": ("4.96", "4.71", "4.51", "3.35"),
        "p3.2xlarge": ("1.00", "1.00", "1.00", "1.00"),
        "p3.8xlarge": ("2.11", "1.76", "1.49", "1.13"),
        "p3.16xlarge": ("2.96", "2.55", "2.23", "1.69"),
    },
    "no": {
        "p2.xlarge": ("2.80", "3.26", "3.62", "2.58"),
        "p2.8xlarge": ("3.87", "3.44", "3.09", "2.24"),
        "p2.16xlarge": ("4.92", "4.66", "4.44", "3.35"),
        "p3.2xlarge": ("1.00", "1.00", "1.00", "1.00"),
        "p3.8xlarge": ("2.14", "1.79", "1.50", "1.13"),
        "p3.16xlarge": ("2.97", "2.55", "2.22", "1.69"),
    },
}


@pytest.mark.parametrize("validation", ["yes", "no"])
@pytest.mark.parametrize("column", range(4))
def test_table_5_10_columns_are_normalised(validation, column):
    published = {vm: _p(TABLE_5_10[validation][vm][column])[0] for vm in VMS}
    normalised = normalise_by_minimum(published)
    assert list(normalised) == list(VMS)
    assert normalised == pytest.approx(published, abs=1e-12)
    assert min(normalised, key=normalised.get) == "p3.2xlarge"
    # Scaling back to absolute times (any positive unit) and normalising gives the column back.
    absolute = {vm: 37.5 * v for vm, v in published.items()}
    assert normalise_by_minimum(absolute) == pytest.approx(published, rel=1e-12)


def test_table_5_10_only_20_epochs_ranks_like_the_real_runtime():
    """Section 5.4: "The simulation with 20 epochs was the only one that could determine
    precisely the order of each VM type" (with validation)."""
    rows = TABLE_5_10["yes"]

    def order(column):
        values = normalise_by_minimum({vm: _p(rows[vm][column])[0] for vm in VMS})
        return sorted(VMS, key=values.get)

    real = order(3)
    assert order(2) == real
    assert order(0) != real and order(1) != real


@pytest.mark.parametrize("validation", ["yes", "no"])
def test_table_5_10_implied_minimum_is_affine_in_epochs(validation):
    """p2.16xlarge's estimates at 5/10/20 epochs (Eq. 5.4 -- plus the implied per-epoch
    validation for the upper half -- with the Table 5.9 inputs) divided by its published ratios
    give p3.2xlarge's estimates, which Eq. 5.3/5.4 make affine in N_ep: the second difference
    E(20) - 3 E(10) + 2 E(5) must be 0 within the rounding of the printed numbers."""
    init, it1, _it2, with_val, without, _e1, _e2 = TABLE_5_9[256]
    n_it, n_ep = _mnist_n_it(256), MNIST_EPOCHS[256]
    ratios = TABLE_5_10[validation]["p2.16xlarge"][:3]
    per_epoch_val = (
        (_p(with_val)[0] - _p(without)[0]) / n_ep if validation == "yes" else 0.0
    )
    second_differences = []
    # The second difference is linear in T(Init)+T(It1) and the published Eq. 5.4 estimate, and
    # monotone in each ratio, so its extremes lie at the corners of the rounding boxes.
    _, ia_lo, ia_hi = _p("46.5")  # 23.2 + 23.3, each +-0.05
    ia_lo, ia_hi = ia_lo - 0.05, ia_hi + 0.05
    for ia, est, *rs in itertools.product(
        (ia_lo, ia_hi), _published_interval(without), *(_published_interval(r) for r in ratios)
    ):
        it2 = (est - ia) / (n_ep * n_it - 1)
        implied = [
            eq_5_3_total_s(ia, 0.0, it2, n_it, n, per_epoch_val, per_epoch_val) / r
            for n, r in zip((5, 10, 20), rs)
        ]
        second_differences.append(implied[2] - 3 * implied[1] + 2 * implied[0])
    assert min(second_differences) <= 0.0 <= max(second_differences), (
        min(second_differences),
        max(second_differences),
    )


# --------------------------------------------------------------------------- properties

times = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)
counts = st.floats(min_value=1.0, max_value=1e4, allow_nan=False, allow_infinity=False)
int_counts = st.integers(min_value=1, max_value=10_000)


@settings(max_examples=60, deadline=None)
@given(init=times, t1=times, t2=times, v1=times, v2=times, n_it=counts, e1=counts, e2=counts)
def test_estimators_monotone_in_epochs_and_non_negative(init, t1, t2, v1, v2, n_it, e1, e2):
    lo, hi = sorted((e1, e2))
    pairs = [
        (eq_4_1_total_s(t1, t2, lo), eq_4_1_total_s(t1, t2, hi)),
        (eq_5_1_total_s(init, t1, t2, lo), eq_5_1_total_s(init, t1, t2, hi)),
        (
            eq_5_3_total_s(init, t1, t2, n_it, lo, v1, v2),
            eq_5_3_total_s(init, t1, t2, n_it, hi, v1, v2),
        ),
        (eq_5_4_total_s(init, t1, t2, n_it, lo), eq_5_4_total_s(init, t1, t2, n_it, hi)),
        (
            averaged_iterations_total_s(init, t1, [t2, v1], n_it, lo, v2, v1),
            averaged_iterations_total_s(init, t1, [t2, v1], n_it, hi, v2, v1),
        ),
    ]
    for small, large in pairs:
        assert 0.0 <= small <= large
    assert eq_5_2_epoch_s(t2, n_it, v2) >= 0.0


@settings(max_examples=60, deadline=None)
@given(init=times, t=times, n_it=int_counts, epochs=int_counts)
def test_exact_for_constant_iteration_times(init, t, n_it, epochs):
    expected = init + epochs * n_it * t
    assert eq_5_4_total_s(init, t, t, n_it, epochs) == pytest.approx(expected, rel=1e-12, abs=1e-9)
    assert eq_5_3_total_s(init, t, t, n_it, epochs, 0.0, 0.0) == pytest.approx(
        expected, rel=1e-12, abs=1e-9
    )
    # Eq. 5.1 with every epoch equal to N_it * t.
    assert eq_5_1_total_s(init, n_it * t, n_it * t, epochs) == pytest.approx(
        expected, rel=1e-12, abs=1e-9
    )


@settings(max_examples=60, deadline=None)
@given(init=times, t1=times, t2=times, n_it=counts, epochs=counts, k=st.integers(1, 12))
def test_averaged_with_equal_iterations_is_eq_5_4(init, t1, t2, n_it, epochs, k):
    averaged = averaged_iterations_total_s(init, t1, [t2] * k, n_it, epochs)
    assert averaged == pytest.approx(
        eq_5_4_total_s(init, t1, t2, n_it, epochs), rel=1e-12, abs=1e-9
    )


@settings(max_examples=60, deadline=None)
@given(init=times, t1=times, t2=times, v1=times, v2=times, n_it=counts, epochs=counts)
def test_eq_5_3_decomposes_into_eq_5_2_epochs(init, t1, t2, v1, v2, n_it, epochs):
    """Eq. 5.3 = T(Init) + first epoch + (N_ep - 1) later epochs, each epoch per Eq. 5.2 (the
    first epoch with its first iteration at T(It1) instead of T(It2)); and Eq. 5.3 minus Eq. 5.4
    is exactly the validation T(Val1) + (N_ep - 1) T(Val2)."""
    total = eq_5_3_total_s(init, t1, t2, n_it, epochs, v1, v2)
    first_epoch = eq_5_2_epoch_s(t2, n_it, v1) - t2 + t1
    later = eq_5_2_epoch_s(t2, n_it, v2)
    assert total == pytest.approx(init + first_epoch + (epochs - 1) * later, rel=1e-9, abs=1e-6)
    # Difference of two large sums: the tolerance is relative to the total, not the difference.
    assert total - eq_5_4_total_s(init, t1, t2, n_it, epochs) == pytest.approx(
        v1 + (epochs - 1) * v2, abs=1e-12 * total + 1e-9
    )


@settings(max_examples=60, deadline=None)
@given(
    base=st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.floats(min_value=1e-3, max_value=1e6, allow_nan=False),
        min_size=1,
        max_size=8,
    )
)
def test_normalise_by_minimum_properties(base):
    out = normalise_by_minimum(base)
    assert list(out) == list(base)
    assert min(out.values()) == 1.0
    assert all(v >= 1.0 for v in out.values())
    assert normalise_by_minimum(out) == pytest.approx(out, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 10**7), b=st.integers(1, 10**5))
def test_iterations_per_epoch_is_ceil(n, b):
    k = iterations_per_epoch(n, b)
    assert (k - 1) * b < n <= k * b


@settings(max_examples=40, deadline=None)
@given(bad=st.one_of(st.integers(max_value=0), st.floats(max_value=0.999, allow_nan=False)))
def test_invalid_epochs_and_iterations_raise(bad):
    with pytest.raises(ValueError, match="epochs"):
        eq_4_1_total_s(1.0, 1.0, bad)
    with pytest.raises(ValueError, match="epochs"):
        eq_5_1_total_s(0.0, 1.0, 1.0, bad)
    with pytest.raises(ValueError, match="epochs"):
        eq_5_3_total_s(0.0, 1.0, 1.0, 10, bad, 0.0, 0.0)
    with pytest.raises(ValueError, match="epochs"):
        eq_5_4_total_s(0.0, 1.0, 1.0, 10, bad)
    with pytest.raises(ValueError, match="epochs"):
        averaged_iterations_total_s(0.0, 1.0, [1.0], 10, bad)
    with pytest.raises(ValueError, match="iterations_per_epoch"):
        eq_5_4_total_s(0.0, 1.0, 1.0, bad, 5)
    with pytest.raises(ValueError, match="iterations_per_epoch"):
        eq_5_2_epoch_s(1.0, bad, 0.0)


@settings(max_examples=40, deadline=None)
@given(bad=st.integers(max_value=0))
def test_invalid_batch_or_dataset_raise(bad):
    with pytest.raises(ValueError, match="global_batch"):
        iterations_per_epoch(1000, bad)
    with pytest.raises(ValueError, match="n_train"):
        iterations_per_epoch(bad, 32)


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, -math.inf, True, "1.0", None])
def test_invalid_times_raise_naming_the_argument(bad):
    with pytest.raises(ValueError, match="init_s"):
        eq_5_4_total_s(bad, 1.0, 1.0, 10, 5)
    with pytest.raises(ValueError, match="first_iteration_s"):
        eq_5_3_total_s(0.0, bad, 1.0, 10, 5, 0.0, 0.0)
    with pytest.raises(ValueError, match="steady_iteration_s"):
        eq_5_4_total_s(0.0, 1.0, bad, 10, 5)
    with pytest.raises(ValueError, match="later_validation_s"):
        eq_5_3_total_s(0.0, 1.0, 1.0, 10, 5, 0.0, bad)
    with pytest.raises(ValueError, match="first_epoch_s"):
        eq_4_1_total_s(bad, 1.0, 5)
    with pytest.raises(ValueError, match=r"iterations_2_to_10_s\[1\]"):
        averaged_iterations_total_s(0.0, 1.0, [1.0, bad], 10, 5)
    with pytest.raises(ValueError, match="real_s"):
        malta_relative_error(bad, 1.0)


def test_invalid_other_inputs():
    with pytest.raises(ValueError, match="iterations_2_to_10_s"):
        averaged_iterations_total_s(0.0, 1.0, [], 10, 5)
    with pytest.raises(ValueError, match="estimated_s"):
        malta_relative_error(1.0, 0.0)
    with pytest.raises(ValueError, match="empty"):
        normalise_by_minimum({})
    with pytest.raises(ValueError, match="'a'"):
        normalise_by_minimum({"a": 0.0, "b": 1.0})
    with pytest.raises(ValueError, match="n_train"):
        iterations_per_epoch(1000.0, 32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="global_batch"):
        iterations_per_epoch(1000, True)


def test_worked_examples_from_the_digest():
    assert eq_5_1_total_s(0.18, 13.69, 11.05, 13) == pytest.approx(146.47, abs=1e-9)
    assert iterations_per_epoch(SEISMIC_N_TRAIN, 256) == 159
    assert iterations_per_epoch(MNIST_N_TRAIN, 256) == 235
    assert malta_relative_error(195.85, 151.7) == pytest.approx(0.2910, abs=5e-5)
    assert eq_5_2_epoch_s(0.5, 10, 1.0) == pytest.approx(6.0)
