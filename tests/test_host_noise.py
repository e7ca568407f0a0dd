"""`trainwise host-noise`: the host's speed wander, kept per host, attached to profiles, in the band."""

from __future__ import annotations

import json
import math

import pytest

from trainwise.cli import main
from trainwise.predict.same_machine import host_stray_fraction, sampled_steps_s, trainwise_estimate
from trainwise.profile import host_noise
from trainwise.profile.runner import attach_host_noise
from trainwise.profile.schema import load_profile

from benchmark_modules import load_benchmark
from test_same_machine import make


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    directory = tmp_path / "host_noise"  # per test (conftest's shared empty store would collect files)
    monkeypatch.setenv("TRAINWISE_HOST_NOISE_DIR", str(directory))
    return directory


def two_level_samples(seconds: int, stretch_s: int = 15, slow: float = 1.5) -> list[dict]:
    """Ten samples a second; the level alternates between 1 and `slow` every `stretch_s` seconds."""
    samples = []
    for tenth in range(seconds * 10):
        t = tenth / 10
        level = slow if (int(t) // stretch_s) % 2 else 1.0
        samples.append({"t_s": t, "compute_s": 0.004 * level, "memory_s": 0.002})
    return samples


def noise_for(hostname: str = "h", stray_p90: float = 0.1, measured_at: str = "2026-11-25T20:00:00+00:00") -> host_noise.HostNoise:
    windows = [host_noise.WindowStray(window_s=w, median=stray_p90 / 2, p90=stray_p90 * (3 / w) ** 0.25, max=stray_p90 * 2)
               for w in host_noise.WINDOWS_S]
    levels = host_noise.ProbeLevels(median_s=0.004, p90_over_p10=1.4, correlation_length_s=12, windows=windows)
    steady = host_noise.ProbeLevels(median_s=0.002, p90_over_p10=1.0, correlation_length_s=0,
                                    windows=[host_noise.WindowStray(window_s=w, median=0, p90=0, max=0)
                                             for w in host_noise.WINDOWS_S])
    return host_noise.HostNoise(hostname=hostname, cpu_model="cpu", measured_at=measured_at,
                                probe_seconds=180, compute=levels, memory=steady)


def test_per_second_levels_take_each_whole_seconds_median_and_drop_the_partial_last():
    samples = [{"t_s": 0.1, "x": 1.0}, {"t_s": 0.5, "x": 9.0}, {"t_s": 0.9, "x": 2.0},
               {"t_s": 1.2, "x": 4.0}, {"t_s": 2.3, "x": 100.0}]
    assert host_noise.per_second_levels(samples, "x") == [2.0, 4.0]


def test_a_steady_host_strays_nowhere_and_a_two_level_host_by_its_levels():
    assert host_noise.window_strays([1.0] * 20, 3) == [0.0] * 18
    levels = [1.0] * 30 + [2.0] * 30 + [1.0] * 30 + [2.0] * 30  # 30 s stretches
    assert max(host_noise.window_strays(levels, 3)) == pytest.approx(1 / 3)  # level 1 or 2 against the mean 1.5
    assert 5 <= host_noise.correlation_length_s(levels) <= 15  # ~a quarter of a 30 s stretch
    assert host_noise.correlation_length_s([1.0, 2.0] * 30) == 1  # alternating every second: no stretch
    assert host_noise.correlation_length_s([1.0] * 10) == 0


def test_measure_summarises_probe_samples_and_keeps_only_windows_with_room_to_slide():
    noise = host_noise.measure(60, samples=two_level_samples(60))
    assert noise.memory.p90_over_p10 == 1.0 and noise.memory.windows[0].p90 == 0.0
    windows = {w.window_s: w for w in noise.compute.windows}
    assert set(windows) == {1, 3, 10, 30}  # 59 whole seconds: 30 positions for the 30 s window
    mean = (30 * 1.0 + 29 * 1.5) / 59  # 59 whole seconds: 30 at level 1, 29 at 1.5
    assert windows[1].p90 == pytest.approx((1.5 - mean) / mean)  # a 1 s window sits at one level or the other
    assert windows[30].p90 < windows[3].p90  # longer windows average the stretches out
    assert noise.compute.correlation_length_s is not None and 2 <= noise.compute.correlation_length_s <= 8
    shortest = host_noise.measure(40, samples=two_level_samples(40))  # 39 bins: the 30 s window's 10 positions
    assert {w.window_s for w in shortest.compute.windows} == {1, 3, 10, 30}
    assert {w.window_s for w in host_noise.summarise_levels([1.0, 2.0] * 18).windows} == {1, 3, 10}  # 7 positions


def test_stray_takes_the_larger_probe_and_interpolates_in_log_window():
    noise = noise_for(stray_p90=0.1)
    assert noise.stray_fraction(3) == pytest.approx(0.1)
    assert noise.stray_fraction(0.2) == pytest.approx(noise.stray_fraction(1))  # shorter than measured: the shortest's
    assert noise.stray_fraction(300) == pytest.approx(noise.stray_fraction(30))
    assert noise.stray_fraction(1) > noise.stray_fraction(2) > noise.stray_fraction(3) > noise.stray_fraction(10)


def test_the_probe_runs_and_reports_progress():
    seen = []
    samples = host_noise.probe_samples(0.6, on_progress=seen.append)
    assert len(samples) > 5 and all(s["compute_s"] > 0 and s["memory_s"] > 0 for s in samples)
    assert seen and seen == sorted(seen)


def test_saved_per_host_and_attached_only_to_that_hosts_profiles(store):
    profile = make([0.5] * 30)  # hostname "h"
    assert attach_host_noise(profile).host_noise is None  # nothing measured yet
    host_noise.save(noise_for("other"))
    assert attach_host_noise(profile).host_noise is None
    path = host_noise.save(noise_for("h"))
    assert path == store / "h.json"
    attached = attach_host_noise(profile)
    assert attached.host_noise == noise_for("h")
    path.write_text("{not json")
    broken = attach_host_noise(profile)
    assert broken.host_noise is None and any("malformed" in note for note in broken.notes)


def test_the_envelope_strays_as_far_as_the_widest_measurement_at_every_window():
    quiet = noise_for(stray_p90=0.02, measured_at="2026-11-25T22:47:00+00:00")
    noisy = noise_for(stray_p90=0.2, measured_at="2026-11-25T20:23:00+00:00")
    # a noisier memory side in the quiet measurement: each probe's windows take their own maximum
    quiet = quiet.model_copy(update={"memory": noise_for(stray_p90=0.05).compute})
    both = host_noise.envelope([quiet, noisy])
    for window_s in (1, 2.9, 3, 10, 30, 100):
        assert both.stray_fraction(window_s) == pytest.approx(noisy.stray_fraction(window_s))
    assert both.memory.windows[0].p90 == pytest.approx(quiet.memory.windows[0].p90)  # 0.05's, not the steady 0
    assert both.measurements == 2 and both.measured_at == quiet.measured_at  # the newest's time (for its age)
    assert both.first_measured_at == noisy.measured_at and both.compute.median_s == quiet.compute.median_s
    assert "widest of 2 measurements 2026-11-25 20:23 to 2026-11-25 22:47 UTC" in both.describe()
    assert host_noise.envelope([quiet]) == quiet
    # an envelope of envelopes counts every measurement and keeps the oldest time
    later = noise_for(stray_p90=0.01, measured_at="2026-11-26T09:00:00+00:00")
    nested = host_noise.envelope([both, later])
    assert nested.measurements == 3 and nested.first_measured_at == noisy.measured_at


def test_the_store_keeps_each_hosts_measurements_and_profiles_carry_their_envelope(store, monkeypatch):
    monkeypatch.setattr(host_noise, "MAX_KEPT", 2)
    noisy = noise_for(stray_p90=0.2, measured_at="2026-11-25T20:23:00+00:00")
    quiet = noise_for(stray_p90=0.02, measured_at="2026-11-25T22:47:00+00:00")
    path = host_noise.save(noisy)
    host_noise.save(quiet)
    carried, problem = host_noise.load_for_host("h")
    assert problem is None and carried == host_noise.envelope([noisy, quiet])
    assert carried.stray_fraction(3) == pytest.approx(noisy.stray_fraction(3))  # the quiet one does not narrow it
    quieter = noise_for(stray_p90=0.01, measured_at="2026-11-26T09:00:00+00:00")
    host_noise.save(quieter)  # MAX_KEPT 2: the 20:23 one goes
    carried, _ = host_noise.load_for_host("h")
    assert carried == host_noise.envelope([quiet, quieter])
    assert [one.measured_at for one in host_noise._read_history(path).measurements] == [quiet.measured_at, quieter.measured_at]
    # the first format (one bare measurement in the store file) still loads, and a new one is added to it
    path.write_text(noisy.model_dump_json())
    assert host_noise.load_for_host("h")[0] == noisy
    host_noise.save(quiet)
    assert host_noise.load_for_host("h")[0] == host_noise.envelope([noisy, quiet])
    # a store file that is not usable is replaced by the new measurement, not merged
    path.write_text("{not json")
    host_noise.save(quiet)
    assert host_noise.load_for_host("h")[0] == quiet


def test_an_old_measurement_is_still_attached_with_a_note_saying_how_old(store):
    noise = noise_for("h")  # measured 2026-11-25 20:00 UTC
    host_noise.save(noise)
    fresh = attach_host_noise(make([0.5] * 30).model_copy(update={"created_at": "2026-11-25T23:30:00+00:00"}))
    assert fresh.host_noise == noise and not any("host-noise" in note for note in fresh.notes)
    assert "3.5 h before the profile" in noise.describe(fresh.created_at)
    later = attach_host_noise(make([0.5] * 30).model_copy(update={"created_at": "2026-11-28T20:00:00+00:00"}))
    assert later.host_noise == noise  # still the best this host has: used, and said to be old
    stale = [note for note in later.notes if "measured 3 days before this profile" in note]
    assert len(stale) == 1 and "`trainwise host-noise`" in stale[0]
    assert noise.age_hours("not a time") is None and "before the profile" not in noise.describe("not a time")


def test_the_band_widens_by_the_hosts_stray_for_the_sampled_window(tmp_path):
    profile = make([0.1] * 30, init_s=3.0, val_batch_s=[0.2] * 5, val_total=20)
    plain = trainwise_estimate(profile, epochs=10)
    assert plain.low_s == pytest.approx(plain.total_s) and "not in it" in plain.note  # constant steps: no spread
    noisy = profile.model_copy(update={"host_noise": noise_for(stray_p90=0.1)})
    assert sampled_steps_s(noisy) == pytest.approx(2.9)  # 29 steady steps of 0.1 s
    stray = host_stray_fraction(noisy)
    assert stray == pytest.approx(noise_for(stray_p90=0.1).stray_fraction(2.9))
    widened = trainwise_estimate(noisy, epochs=10)
    assert widened.total_s == pytest.approx(plain.total_s)  # the point estimate does not move
    iterations_and_validation_s = 10 * 100 * 0.1 + 10 * 20 * 0.2
    assert widened.high_s - widened.total_s == pytest.approx(iterations_and_validation_s * stray)
    assert f"±{stray:.1%}" in widened.note
    # the attachment survives a save and load
    path = noisy.save(tmp_path / "p.json")
    assert load_profile(path).host_noise == noisy.host_noise


def test_cli_rejects_a_short_probe_without_probing(store, capsys):
    assert main(["host-noise", "--seconds", "5"]) != 0
    err = capsys.readouterr().err
    assert "--seconds must be at least 40" in err and "Traceback" not in err
    assert not store.exists()


def test_benchmark_summary_reads_the_measurement():
    module = load_benchmark("host_noise")
    summary = module.summary_of(host_noise.measure(60, samples=two_level_samples(60)))
    assert summary["window_3s_stray_median"]["memory"] == 0.0
    assert summary["band_stray_for_3s_of_steps"] == summary["window_3s_stray_p90"]["compute"]
    json.dumps(summary)


def test_cli_measures_keeps_it_for_this_host_and_reports(store, monkeypatch, capsys):
    # the probe's timing is the benchmark's job (benchmarks/host_noise.py); here: the command's wiring
    monkeypatch.setattr(host_noise, "probe_samples", lambda seconds, on_progress=None: two_level_samples(int(seconds)))
    assert main(["host-noise", "--seconds", "60"]) == 0
    out = capsys.readouterr().out
    saved, problem = host_noise.load_for_host()
    assert problem is None and saved is not None and saved.probe_seconds == 60
    assert "compute:" in out and "memory:" in out and "wrote" in out
    assert main(["host-noise", "--seconds", "60", "-o", str(store / "elsewhere.json")]) == 0
    assert host_noise.HostNoise.model_validate_json((store / "elsewhere.json").read_text()).probe_seconds == 60
    capsys.readouterr()
    assert main(["host-noise", "--seconds", "60"]) == 0  # a second one for this host: kept beside the first
    assert "the widest of 2 measurements" in capsys.readouterr().out
    assert host_noise.load_for_host()[0].measurements == 2


def test_band_rescoring_swaps_only_the_host_term():
    module = load_benchmark("band_coverage")
    other_s, base_s = 3.0, 100.0
    half = math.hypot(other_s, base_s * 0.1)
    row = {"workload": "w", "batch_size": 8, "actual_s": 118.0, "band_s": [100.0 - half, 100.0 + half + 5.0],
           "predicted_s": {"trainwise": base_s}, "host_stray": 0.1, "sampled_steps_s": 2.0}
    assert module.rescored_band(row, 0.1) == pytest.approx(tuple(row["band_s"]))
    low, high = module.rescored_band(row, 0.2)
    widened = math.hypot(other_s, base_s * 0.2) - half
    assert (low, high) == pytest.approx((row["band_s"][0] - widened, row["band_s"][1] + widened))  # the +5 kept
    scored = module.rescore([row, {**row, "host_stray": None}], noise_for(stray_p90=0.3))
    assert scored["of"] == 1 and scored["inside_then"] == 0 and scored["inside_now"] == 1


def test_an_output_folder_is_refused_before_the_probe(tmp_path, capsys, monkeypatch):
    # `host-noise -o FOLDER` probed for the whole --seconds and only then said it could not write
    def no_probe(*args, **kwargs):
        raise AssertionError("probed although --output could not be written")

    monkeypatch.setattr(host_noise, "measure", no_probe)
    code = main(["host-noise", "--seconds", "40", "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--output" in err and "is a folder" in err and "Traceback" not in err


def test_the_measurement_records_the_mean_level_a_long_run_averages():
    noise = host_noise.measure(60, samples=two_level_samples(60))
    mean = (30 * 1.0 + 29 * 1.5) / 59 * 0.004  # 59 whole seconds: 30 at level 1, 29 at 1.5
    assert noise.compute.mean_s == pytest.approx(mean) and noise.compute.median_s == pytest.approx(0.004)
    assert noise.mean_level_s() == pytest.approx(mean + 0.002)
    assert noise_for().mean_level_s() is None  # a measurement from before the mean was kept
    # the envelope keeps the newest measurement's level
    older = host_noise.measure(60, samples=two_level_samples(60, slow=3.0)).model_copy(update={"measured_at": "2026-11-24T00:00:00+00:00"})
    assert host_noise.envelope([older, noise]).mean_level_s() == pytest.approx(noise.mean_level_s())


def test_the_probe_level_is_in_the_measurements_units():
    level_s = host_noise.probe_level_s(0.2)
    samples = host_noise.probe_samples(0.5)
    per_sample_s = sorted(s["compute_s"] + s["memory_s"] for s in samples)
    assert per_sample_s[0] / 2 < level_s < per_sample_s[-1] * 2


def leveled(profile, reference_s: float | None, window_levels_s: list[float], **environment):
    noise = noise_for()
    if reference_s is not None:
        noise = noise.model_copy(update={"compute": noise.compute.model_copy(update={"mean_s": reference_s - 0.002}),
                                         "memory": noise.memory.model_copy(update={"mean_s": 0.002})})
    from trainwise.profile.schema import LevelProbe

    probes = [LevelProbe(where=where, after_iteration=n, level_s=level)
              for where, n, level in zip(("before", "after"), (1, len(profile.iterations)), window_levels_s)]
    # profiled half an hour after the measurement: its mean level still speaks for the host
    return profile.model_copy(update={"host_noise": noise, "level_probes": probes, "created_at": "2026-11-25T20:30:00+00:00",
                                      "environment": profile.environment.model_copy(update=environment)})


def test_a_mean_level_measured_hours_before_the_profile_corrects_nothing_and_says_so():
    base = make([0.03] * 30, init_s=3.0, val_batch_s=[0.2] * 5, val_total=20, epoch2=[0.03] * 4)
    plain = trainwise_estimate(base, epochs=10)
    fresh = load_profile_like(leveled(base, 0.006, [0.0074, 0.0076]))
    assert trainwise_estimate(fresh, epochs=10).total_s < plain.total_s
    stale = load_profile_like(fresh.model_copy(update={"created_at": "2026-11-25T22:43:00+00:00"}))  # 2.7 h later
    estimate = trainwise_estimate(stale, epochs=10)
    assert estimate.total_s == pytest.approx(plain.total_s) and "host_level_correction_s" not in estimate.breakdown_s
    assert "no host-level correction" in estimate.note and "run `trainwise host-noise` right before" in estimate.note


def test_the_level_correction_scales_steps_and_validation_to_the_hosts_mean_level():
    from trainwise.predict.same_machine import host_level_correction, level_correction_weight

    # a sample of under a second: the steps share all of the probe's stray; the reference (a 3-minute mean)
    # strays 5.6 % against the probe's 13.2 %, so the probe's ratio moves the steps 85 % of the way
    base = make([0.03] * 30, init_s=3.0, val_batch_s=[0.2] * 5, val_total=20, epoch2=[0.03] * 4)
    plain = trainwise_estimate(base, epochs=10)
    weight = level_correction_weight(noise_for(), 0.5)
    assert 0.8 < weight < 0.9
    # the probe beside the steps ran 25 % slower than the host's mean level: the steps were slow too
    slow_window = load_profile_like(leveled(base, 0.006, [0.0074, 0.0076]))
    corrected = trainwise_estimate(slow_window, epochs=10)
    factor = (0.006 / 0.0075) ** weight
    moved_s = plain.breakdown_s["iterations_s"] + plain.breakdown_s["validation_s"]
    assert corrected.total_s == pytest.approx(plain.total_s + (factor - 1) * moved_s)
    assert corrected.breakdown_s["host_level_correction_s"] == pytest.approx((factor - 1) * moved_s)
    assert sum(corrected.breakdown_s.values()) == pytest.approx(corrected.total_s)  # the parts add up
    assert "ran 25.0% slower than this host's mean level" in corrected.note and f"×{factor:.3f}" in corrected.note
    assert trainwise_estimate(slow_window, epochs=10, level_correction=False).total_s == pytest.approx(plain.total_s)
    # a fast window is scaled up; an absurd one is clipped
    assert host_level_correction(leveled(base, 0.006, [0.005, 0.005])).factor == pytest.approx(1.2 ** weight)
    assert host_level_correction(leveled(base, 0.006, [0.1, 0.1])).factor == pytest.approx((1 / 1.5) ** weight)
    # no correction without a reference level (an older measurement), on another CPU model, on a GPU, without probes
    assert host_level_correction(leveled(base, None, [0.0075, 0.0075])) is None
    assert host_level_correction(leveled(base, 0.006, [0.0075, 0.0075], cpu_model="another")) is None
    assert host_level_correction(leveled(base, 0.006, [0.0075, 0.0075], device="cuda")) is None
    assert host_level_correction(leveled(base, 0.006, [])) is None


def load_profile_like(profile):
    """Through JSON and back, as a saved profile is read."""
    from trainwise.profile.schema import Profile

    return Profile.model_validate_json(profile.model_dump_json())


def test_a_long_sample_takes_the_probes_ratio_weighted_by_how_much_of_the_wander_it_averaged():
    from trainwise.predict.same_machine import host_level_correction, level_correction_weight, sampled_steps_s

    noise = noise_for()  # 90th-percentile strays 13.2 % for a 1-s window, 5.6 % for 30 s (and longer)
    probe_share = level_correction_weight(noise, 0.5)
    assert level_correction_weight(noise, 30.0) == pytest.approx(
        probe_share * noise.stray_fraction(30.0) / noise.stray_fraction(1.0))
    assert level_correction_weight(noise, 600.0) == level_correction_weight(noise, 30.0)  # measured windows only
    assert level_correction_weight(noise, 3.0) > level_correction_weight(noise, 10.0) > level_correction_weight(noise, 30.0)
    # a 3-minute sample beside a probe 25 % slower than the host's mean: scaled by 0.8 ** 0.36, not by 0.8
    long = make([0.5] * 360, init_s=3.0)
    corrected = host_level_correction(leveled(long, 0.006, [0.0075, 0.0075]))
    weight = level_correction_weight(noise, sampled_steps_s(long))
    assert 0.3 < weight < 0.5 and corrected.factor == pytest.approx(0.8 ** weight)
    assert "weighted" in corrected.note and "a 180-s mean, strays too" in corrected.note


def test_the_reference_counts_as_much_as_its_own_stray_allows():
    """Inverse-variance weighting of the probe's instant and the reference's few-minute mean: a host whose
    levels last minutes (its 30-s windows stray as far as its 1-s ones) moves a short sample half way to the
    reference; a host whose wander averages out in seconds, nearly all the way."""
    from trainwise.predict.same_machine import level_correction_weight

    def flat(stray_1s: float, stray_30s: float):
        windows = [host_noise.WindowStray(window_s=w, median=0.0, p90=p90, max=p90)
                   for w, p90 in ((1, stray_1s), (3, stray_1s), (10, stray_30s), (30, stray_30s))]
        return noise_for().model_copy(update={
            "compute": noise_for().compute.model_copy(update={"windows": windows}),
            "memory": noise_for().memory.model_copy(update={"windows": windows})})

    assert level_correction_weight(flat(0.25, 0.25), 0.5) == pytest.approx(0.5)
    assert level_correction_weight(flat(0.25, 0.01), 0.5) == pytest.approx(0.25 ** 2 / (0.25 ** 2 + 0.01 ** 2))
    assert level_correction_weight(flat(0.0, 0.0), 5.0) == 1.0  # a host that never strays: the ratio as it is
