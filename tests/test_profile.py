"""The profiler on real, unmodified PyTorch scripts run as subprocesses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainwise.errors import TrainwiseError
from trainwise.profile.runner import ProfileOptions, expand_batch_sizes, run_profile

SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.slow


def script(name: str, *args: str) -> list[str]:
    return [sys.executable, str(SCRIPTS / name), *args]


def shared_run_environment(tmp_path_factory) -> pytest.MonkeyPatch:
    """For a module-scoped run, which starts before the per-test fixtures of conftest.py: the same empty
    host-noise store, and no allocator variable from the developer's shell."""
    patch = pytest.MonkeyPatch()
    patch.setenv("TRAINWISE_HOST_NOISE_DIR", str(tmp_path_factory.getbasetemp() / "host_noise_store"))
    patch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    patch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    return patch


# Each profiling run is seconds of a subprocess: tests that only read the record share one run.
@pytest.fixture(scope="module")
def sampled_mlp(tmp_path_factory):
    """A sampled profile of mlp_train.py (50 epochs, stopped early), and the file its end would write."""
    done = tmp_path_factory.mktemp("sampled") / "done"
    options = ProfileOptions(min_iterations=6, max_iterations=8, validation_batches=3, epoch2_iterations=2)
    patch = shared_run_environment(tmp_path_factory)
    try:
        return run_profile(script("mlp_train.py", "--epochs", "50", "--done-file", str(done)), options, quiet=True), done
    finally:
        patch.undo()


@pytest.fixture(scope="module")
def full_mlp_one_epoch(tmp_path_factory):
    """A complete run of mlp_train.py (1 epoch) with trainwise's defaults (no characterisation)."""
    patch = shared_run_environment(tmp_path_factory)
    try:
        return run_profile(script("mlp_train.py", "--epochs", "1"), ProfileOptions(mode="full", characterise=False),
                           quiet=True)
    finally:
        patch.undo()


def sampled_s(profile) -> float:
    """Seconds from the first sampled iteration's start to the last one's end."""
    return profile.iterations[-1].start_s + profile.iterations[-1].wall_s - profile.iterations[0].start_s


def test_sampled_profile_stops_early_and_times_validation_and_epoch2(sampled_mlp):
    profile, done = sampled_mlp
    assert profile.mode == "sampled"
    assert profile.stop_reason == "sampled"
    first, second = profile.epochs[0], profile.epochs[1]
    assert first.truncated and 6 <= first.iterations <= 8
    assert second.iterations == 2
    assert len(profile.iterations) == first.iterations + 2
    v = profile.validations[0]
    assert v.batches_timed == 3 and v.batches_total == 20 and v.truncated
    assert profile.dataset.n_train == 640 and profile.dataset.n_val == 320
    assert profile.dataset.train_batches_per_epoch == 40 and profile.dataset.iterations_per_epoch == 40
    assert profile.dataset.global_batch_size == 16
    # The rest of the script (here: "save the model") must not run after a sampled profile.
    assert not done.exists()
    s = profile.steady_state
    assert s.warmup_iterations >= 1 and s.iteration.n >= 1
    assert s.iteration.ci95_low_s <= s.iteration.mean_s <= s.iteration.ci95_high_s
    for it in profile.iterations:
        assert it.wall_s == pytest.approx(it.data_wait_s + it.compute_s)
        assert it.data_wait_s > 0
    init = profile.init
    assert 0 < init.python_startup_s < init.total_s
    assert init.import_torch_s is not None and init.import_torch_s > 0
    assert profile.model.parameters == 32 * 64 + 64 + 64 * 2 + 2
    assert profile.model.optimizer == "Adam"
    assert profile.memory.peak_rss_bytes > 10 * 2**20
    assert profile.environment.torch_version == __import__("torch").__version__  # the torch the job ran with (compat: 2.13)
    # the script's own --epochs, read from its argparse namespace: the N_ep predict and plan default to
    assert profile.script_epochs is not None and profile.script_epochs.epochs == 50
    assert "argparse" in profile.script_epochs.source
    if sys.platform.startswith("linux"):  # the hypervisor's share of the CPUs over the sampled steps
        assert profile.sample_cpu_steal is not None and 0 <= profile.sample_cpu_steal <= 1


def test_full_mode_runs_to_completion(tmp_path):
    done = tmp_path / "done"
    profile = run_profile(script("mlp_train.py", "--epochs", "2", "--done-file", str(done)),
                          ProfileOptions(mode="full"), quiet=True)
    assert done.read_text() == "trained"
    assert profile.full_run is not None and profile.full_run.epochs_completed == 2
    assert len(profile.iterations) == 80
    assert [v.batches_timed for v in profile.validations] == [20, 20]
    assert not any(e.truncated for e in profile.epochs)
    assert profile.full_run.training_end_s <= profile.process_wall_s + 0.5
    assert profile.characterisation is not None  # a full profile is characterised too (unless told not to)
    # the hypervisor's share of the CPUs over its training, read from /proc/stat where there is one
    if sys.platform.startswith("linux"):
        assert profile.sample_cpu_steal is not None and 0 <= profile.sample_cpu_steal <= 1


@pytest.mark.long
def test_a_sampled_profile_times_the_host_level_probe_beside_its_steps_and_outside_them(full_mlp_one_epoch):
    sampled = run_profile(script("mlp_train.py", "--epochs", "50"),
                          ProfileOptions(min_iterations=30, max_iterations=30, validation_batches=2, epoch2_iterations=2,
                                         level_probe_s=0.2), quiet=True)
    probes = sampled.level_probes
    assert [(p.where, p.after_iteration) for p in probes] == [("before", 1), ("after", 30)]
    assert all(0 < p.level_s < 1 for p in probes)
    # 0.2 s of probing after iteration 1 and after iteration 30: in no iteration (steps here take milliseconds)
    assert max(it.wall_s for it in sampled.iterations[1:]) < 0.15
    assert len(sampled.iterations) == 32 and sampled.steady_state.iteration.mean_s < 0.05
    # a full run, or --level-probe-seconds 0, probes nothing
    assert full_mlp_one_epoch.level_probes == []
    with pytest.raises(TrainwiseError, match="--level-probe-seconds"):
        ProfileOptions(level_probe_s=-1).validate()


def test_gradient_accumulation_counts_optimizer_steps():
    profile = run_profile(script("mlp_train.py", "--epochs", "1", "--accumulate", "2"), ProfileOptions(mode="full"), quiet=True)
    assert len(profile.iterations) == 20
    assert profile.dataset.batches_per_iteration == 2
    assert profile.dataset.global_batch_size == 32
    assert profile.dataset.iterations_per_epoch == 20


# Unit-tested with a synthetic pass stream (tests/test_profile_recorder_units.py); end to end with the long tests.
@pytest.mark.long
def test_a_training_pass_begun_in_eval_mode_is_training_not_validation():
    # model.train() inside the step: each later epoch's pass starts while validation left eval mode on
    profile = run_profile(script("mlp_train.py", "--epochs", "2", "--train-inside-step"), ProfileOptions(mode="full"),
                          quiet=True)
    assert [e.iterations for e in profile.epochs] == [40, 40]
    assert [v.batches_timed for v in profile.validations] == [20, 20]
    assert all(it.batches == 1 and it.samples == 16 for it in profile.iterations)
    assert any("eval mode" in note for note in profile.notes)
    sampled = run_profile(script("mlp_train.py", "--epochs", "50", "--train-inside-step"),
                          ProfileOptions(min_iterations=6, max_iterations=8, validation_batches=3, epoch2_iterations=2),
                          quiet=True)
    assert sampled.stop_reason == "sampled" and sampled.epochs[1].iterations == 2


# Unit-tested with a synthetic profile (tests/test_same_machine.py), the passes kept out of the steps by the
# mid-epoch test below; end to end with the long tests.
@pytest.mark.long
def test_validation_every_n_steps_is_out_of_the_iterations_and_counted_per_epoch():
    from trainwise.predict.same_machine import predict_total, validation_passes_per_epoch

    full = run_profile(script("mlp_train.py", "--epochs", "1", "--validate-every", "10", "--val-samples", "3200"),
                       ProfileOptions(mode="full"), quiet=True)
    assert len(full.iterations) == 40 and len(full.validations) == 4
    assert validation_passes_per_epoch(full, 40) == (4, 10)
    pass_s = min(v.wall_s for v in full.validations)
    # the steps right after a mid-epoch pass do not contain it
    for after in (10, 20, 30):
        assert full.iterations[after].wall_s < pass_s / 2
    # a sampled profile sees the passes at steps 10 and 20 and predicts 4 per epoch
    sampled = run_profile(script("mlp_train.py", "--epochs", "50", "--validate-every", "10", "--val-samples", "3200"),
                          ProfileOptions(min_iterations=25, max_iterations=25, validation_batches=3, epoch2_iterations=2),
                          quiet=True)
    assert validation_passes_per_epoch(sampled, 40) == (4, 10)
    prediction = predict_total(sampled, 3)
    assert "4 passes per epoch, 12 in all" in prediction.note


@pytest.mark.long
def test_evaluating_the_training_set_without_eval_or_no_grad_is_validation_not_an_empty_epoch():
    from trainwise.predict.same_machine import predict_total, validation_estimates

    # after each epoch the script computes the loss over the *training* loader (gradients on, train
    # mode, no step), then validates: it was read as a second, empty epoch per epoch
    full = run_profile(script("mlp_train.py", "--epochs", "2", "--train-eval", "plain"), ProfileOptions(mode="full"),
                       quiet=True)
    assert [e.iterations for e in full.epochs] == [40, 40] and full.full_run.epochs_completed == 2
    assert [(v.epoch, v.loader, v.batches_timed, v.batches_total) for v in full.validations] == [
        (0, 0, 40, 40), (0, 1, 20, 20), (1, 0, 40, 40), (1, 1, 20, 20)]
    # N_val is the validation set's: evaluating the training set does not make it the validation set
    assert full.dataset.iterations_per_epoch == 40 and full.dataset.n_train == 640 and full.dataset.n_val == 320
    assert any("evaluation of the training set" in note for note in full.notes)
    loaders = validation_estimates(full, 40)
    assert [(v.loader, v.batches_per_pass, v.passes_per_epoch) for v in loaders] == [(0, 40, 1), (1, 20, 1)]
    prediction = predict_total(full, 2)
    assert "validation over 2 DataLoaders per epoch (passes of 40, 20 batches)" in prediction.note
    # both loaders' passes are in the prediction: 4 passes, not 2 of the first loader's length
    measured_s = sum(v.wall_s for v in full.validations)
    assert prediction.breakdown_s["validation_s"] == pytest.approx(measured_s, rel=0.5)
    assert prediction.breakdown_s["validation_s"] > sum(v.wall_s for v in full.validations if v.loader == 0)


@pytest.mark.long
def test_a_sampled_profile_times_every_loader_evaluated_after_the_truncated_epoch():
    from trainwise.predict.same_machine import predict_total

    # the training set, then the validation set, each evaluated with eval() and no_grad after every epoch
    sampled = run_profile(script("mlp_train.py", "--epochs", "50", "--train-eval", "eval"),
                          ProfileOptions(min_iterations=6, max_iterations=8, validation_batches=3, epoch2_iterations=2),
                          quiet=True)
    assert sampled.stop_reason == "sampled" and len(sampled.epochs) == 2 and sampled.epochs[1].iterations == 2
    # each pass cut short after 3 batches, sized by its own loader (it was the first loader's length for all)
    assert [(v.epoch, v.loader, v.batches_timed, v.batches_total, v.truncated) for v in sampled.validations] == [
        (0, 0, 3, 40, True), (0, 1, 3, 20, True)]
    assert sampled.dataset.n_val == 320 and sampled.dataset.val_batches_per_pass == 20
    prediction = predict_total(sampled, 50)
    assert "validation over 2 DataLoaders per epoch (passes of 40, 20 batches)" in prediction.note


# Unit-tested with a synthetic pass stream (tests/test_profile_recorder_units.py); end to end with the long tests.
@pytest.mark.long
def test_a_validation_loop_without_eval_or_no_grad_is_validation_not_an_epoch():
    from trainwise.predict.same_machine import predict_total

    # the validation loop just computes the loss over its own loader: gradients on, train mode, no step
    full = run_profile(script("mlp_train.py", "--epochs", "2", "--plain-validation"), ProfileOptions(mode="full"), quiet=True)
    assert [e.iterations for e in full.epochs] == [40, 40]
    assert [(v.epoch, v.batches_timed, v.batches_total) for v in full.validations] == [(0, 20, 20), (1, 20, 20)]
    assert full.dataset.n_train == 640 and full.dataset.n_val == 320 and full.dataset.val_batches_per_pass == 20
    assert full.dataset.iterations_per_epoch == 40 and full.full_run.epochs_completed == 2
    assert all(it.batches == 1 and it.samples == 16 for it in full.iterations)
    # an epoch's span is its training pass: it ends before the validation pass begins
    assert full.epochs[0].end_s <= full.validations[0].start_s < full.epochs[1].start_s
    assert any("without model.eval() or torch.no_grad()" in note for note in full.notes)
    prediction = predict_total(full, 2)
    assert prediction.breakdown_s["validation_s"] > 0 and "no validation pass observed" not in prediction.note
    # sampled: validation is timed and cut short like any other, then epoch 2's first iterations
    sampled = run_profile(script("mlp_train.py", "--epochs", "50", "--plain-validation"),
                          ProfileOptions(min_iterations=6, max_iterations=8, validation_batches=3, epoch2_iterations=2),
                          quiet=True)
    assert sampled.stop_reason == "sampled" and len(sampled.epochs) == 2
    assert sampled.epochs[0].truncated and sampled.epochs[1].iterations == 2
    assert [it.epoch for it in sampled.iterations][-2:] == [1, 1]
    v = sampled.validations[0]
    assert len(sampled.validations) == 1 and v.truncated and v.batches_timed == 3 and v.batches_total == 20
    assert sampled.dataset.n_val == 320


@pytest.mark.long
def test_a_mid_epoch_validation_loop_without_eval_is_kept_out_of_the_epoch_and_its_iterations():
    full = run_profile(script("mlp_train.py", "--epochs", "1", "--validate-every", "10", "--val-samples", "3200",
                              "--plain-validation"), ProfileOptions(mode="full"), quiet=True)
    assert len(full.epochs) == 1 and full.epochs[0].iterations == 40 and full.epochs[0].end_s is not None
    assert len(full.iterations) == 40 and len(full.validations) == 4
    assert all(it.epoch == 0 and it.batches == 1 for it in full.iterations)
    pass_s = min(v.wall_s for v in full.validations)
    for after in (10, 20, 30):
        assert full.iterations[after].wall_s < pass_s / 2


# Unit-tested with a synthetic pass stream (tests/test_profile_recorder_units.py); end to end with the long tests.
@pytest.mark.long
def test_a_look_at_one_batch_before_training_is_neither_an_epoch_nor_validation():
    profile = run_profile(script("mlp_train.py", "--epochs", "2", "--peek"), ProfileOptions(mode="full"), quiet=True)
    assert [e.iterations for e in profile.epochs] == [40, 40]
    assert [v.batches_timed for v in profile.validations] == [20, 20]
    assert profile.dataset.n_train == 640 and profile.dataset.n_val == 320
    assert profile.iterations[0].start_s >= profile.epochs[0].start_s


@pytest.mark.long
def test_checkpoints_saved_during_sampling_leave_the_users_file_untouched(tmp_path):
    checkpoint = tmp_path / "ckpt.pt"
    checkpoint.write_bytes(b"the user's real checkpoint")
    profile = run_profile(script("mlp_train.py", "--epochs", "50", "--checkpoint-file", str(checkpoint)),
                          ProfileOptions(min_iterations=12, max_iterations=12, validation_batches=3, epoch2_iterations=2),
                          quiet=True)
    # the script saved (and read back) its checkpoint every 5 steps: that went to a scratch file, now gone
    assert profile.stop_reason == "sampled" and len(profile.iterations) == 14
    assert checkpoint.read_bytes() == b"the user's real checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    assert any("saved " + str(checkpoint) in note and "untouched" in note for note in profile.notes)
    # a --full run is the user's real run: it writes the file
    run_profile(script("mlp_train.py", "--epochs", "1", "--checkpoint-file", str(checkpoint)), ProfileOptions(mode="full"),
                quiet=True)
    assert checkpoint.read_bytes() != b"the user's real checkpoint"


@pytest.mark.long
def test_a_checkpoint_the_script_copies_by_itself_exists_where_it_was_saved(tmp_path):
    # pytorch/examples' ImageNet script saves checkpoint.pth.tar, then shutil.copyfile()s it to model_best.pth.tar:
    # a save redirected to a scratch file would make that copy fail (the script crashed under the profiler)
    checkpoint, best = tmp_path / "checkpoint.pth.tar", tmp_path / "model_best.pth.tar"
    profile = run_profile(script("mlp_train.py", "--epochs", "50", "--checkpoint-file", str(checkpoint),
                                 "--best-file", str(best)),
                          ProfileOptions(min_iterations=12, max_iterations=12, validation_batches=3, epoch2_iterations=2),
                          quiet=True)
    assert profile.stop_reason == "sampled" and len(profile.iterations) == 14
    assert not checkpoint.exists() and best.exists()  # the profile's own save removed, the script's copy kept
    assert any("no such file existed" in note and "copies the script made of it stay" in note for note in profile.notes)


# Unit-tested with synthetic recorder state (tests/test_profile_recorder_units.py); end to end with the long tests.
@pytest.mark.long
def test_sampling_that_ends_in_the_last_epoch_does_not_save_the_model(tmp_path):
    saved = tmp_path / "model.pt"
    quick = dict(min_iterations=6, max_iterations=8, validation_batches=3, epoch2_iterations=2)
    # epochs the profile cannot read (--passes): the save after the sampled epoch may be an end-of-epoch
    # checkpoint with epoch 2 to come, so it goes to a scratch file and the script goes on; here it was the
    # end of training, and the user's file is untouched all the same
    profile = run_profile(script("mlp_train.py", "--passes", "1", "--save-file", str(saved)), ProfileOptions(**quick),
                          quiet=True)
    assert profile.stop_reason == "script_ended_after_sampling" and not saved.exists() and profile.script_epochs is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    done = tmp_path / "done"
    # with --epochs, or the script's own --epochs read from its arguments, the profile knows the sampled
    # epoch is the last: it ends once validation is timed
    for command, hint in ((("--passes", "1"), 1), (("--epochs", "1"), None)):
        profile = run_profile(script("mlp_train.py", *command, "--done-file", str(done)),
                              ProfileOptions(**quick, epochs_hint=hint), quiet=True)
        assert profile.stop_reason == "validation_timed" and not done.exists()
    # without either, the end of the script runs, and the profile says so
    profile = run_profile(script("mlp_train.py", "--passes", "1", "--done-file", str(done)), ProfileOptions(**quick),
                          quiet=True)
    assert profile.stop_reason == "script_ended_after_sampling"
    assert any("end-of-training code ran" in note for note in profile.notes)


# Unit-tested with synthetic recorder state (tests/test_profile_recorder_units.py); end to end with the long tests.
@pytest.mark.long
def test_a_script_that_calls_sys_exit_mid_training_still_gets_its_profile_and_says_so(tmp_path):
    seen = tmp_path / "seen.json"
    full = run_profile(script("exit_mid_training.py", str(seen), "--exit-after", "12"), ProfileOptions(mode="full"),
                       quiet=True)
    assert full.exit_code == 0 and len(full.iterations) == 12
    assert full.stop_reason == "script_exited_mid_training"
    assert any("sys.exit(0) after 12 iterations, in the middle of epoch 1" in note for note in full.notes)
    assert len(full.epochs) == 1 and full.epochs[0].end_s is None and full.full_run.epochs_completed == 0
    sampled = run_profile(script("exit_mid_training.py", str(seen), "--exit-after", "12"), ProfileOptions(), quiet=True)
    assert sampled.stop_reason == "script_exited_mid_training" and len(sampled.iterations) == 12
    assert any("before sampling had stopped" in note for note in sampled.notes)
    builtin = run_profile(script("exit_mid_training.py", str(seen), "--exit-after", "7", "--builtin-exit"),
                          ProfileOptions(mode="full"), quiet=True)
    assert builtin.stop_reason == "script_exited_mid_training" and len(builtin.iterations) == 7
    assert any("exit(0) after 7 iterations, in the middle of epoch 1" in note for note in builtin.notes)
    # a script that ends after its training, with or without sys.exit, is an ordinary end
    ended = run_profile(script("exit_mid_training.py", str(seen)), ProfileOptions(mode="full"), quiet=True)
    assert ended.stop_reason == "script_exited" and len(ended.iterations) == 80


@pytest.mark.long
def test_the_scripts_arguments_and_environment_reach_it_unchanged(tmp_path, monkeypatch):
    import json

    seen = tmp_path / "seen.json"
    args = ["--lr", "0.1 0.2", "é \"quoted\" $HOME *", "", "--", "{x}", "--exit-after", "3"]
    monkeypatch.setenv("TRAINWISE_TEST_VALUE", "a b 'c' $PATH é")
    run_profile(script("exit_mid_training.py", str(seen), *args), ProfileOptions(mode="full"), quiet=True)
    assert json.loads(seen.read_text()) == {"argv": args, "env": "a b 'c' $PATH é"}


def test_explicit_api_for_custom_loops():
    profile = run_profile(script("custom_loop.py"), ProfileOptions(mode="full"), quiet=True)
    assert len(profile.iterations) == 50
    assert all(it.samples == 8 for it in profile.iterations)


@pytest.mark.long
def test_grad_scaler_steps_delimit_iterations():
    profile = run_profile(script("grad_scaler.py"), ProfileOptions(mode="full"), quiet=True)
    assert len(profile.iterations) == 64
    assert profile.dataset.iterations_per_epoch == 32


# (crash_early.py, "exited with code 1 before its first iteration": tests/test_cli.py profiles it through the CLI)
@pytest.mark.parametrize("name, message", [
    pytest.param("crash_later.py", "crashed (exit code 1) after 4 iterations", marks=pytest.mark.long),
    ("inference_only.py", "without a single training iteration"),
])
def test_broken_scripts_give_clear_errors(name, message):
    args = ("0.5",) if name == "inference_only.py" else ()
    with pytest.raises(TrainwiseError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_profile(script(name, *args), ProfileOptions(), quiet=True)


@pytest.mark.long
def test_timeout_kills_a_hanging_job(tmp_path):
    with pytest.raises(TrainwiseError, match="--timeout"):
        run_profile(script("hang.py"), ProfileOptions(timeout_s=5), quiet=True)
    # a checkpoint saved before the hang went to a scratch file, which the runner removes after the kill
    with pytest.raises(TrainwiseError, match="--timeout"):
        run_profile(script("hang.py", str(tmp_path / "ckpt.pt")), ProfileOptions(timeout_s=8), quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_bad_options_and_commands():
    with pytest.raises(TrainwiseError, match="no training command"):
        run_profile([], ProfileOptions())
    with pytest.raises(TrainwiseError, match="command not found"):
        run_profile(["definitely-not-a-command-xyz"], ProfileOptions())
    with pytest.raises(TrainwiseError, match="at least 2"):
        ProfileOptions(min_iterations=1).validate()
    with pytest.raises(TrainwiseError, match="placeholder"):
        expand_batch_sizes(["python", "t.py"], [8])
    assert expand_batch_sizes(["python", "t.py", "--batch-size={batch}"], [8, 16]) == [
        (8, ["python", "t.py", "--batch-size=8"]), (16, ["python", "t.py", "--batch-size=16"])]


@pytest.mark.long
def test_dataloader_workers_and_a_reference_workload():
    from trainwise.workloads import command_for

    command = command_for("nn_twins_mlp", batch_size=32, epochs=20, train_samples=3200, val_samples=640, num_workers=2, threads=1)
    profile = run_profile(command, ProfileOptions(min_iterations=10, max_iterations=12, validation_batches=2, epoch2_iterations=2),
                          workload="nn_twins_mlp", quiet=True)
    assert profile.dataset.num_workers == 2
    assert profile.dataset.iterations_per_epoch == 100
    assert profile.validations and profile.validations[0].batches_timed == 2
    assert profile.epochs[1].iterations == 2
    # With worker processes a batch is usually ready: the wait is measured, not assumed.
    assert all(it.data_wait_s >= 0 for it in profile.iterations)


def test_profile_carries_a_workload_characterisation_of_the_model(sampled_mlp):
    profile, _ = sampled_mlp
    char = profile.characterisation
    assert char is not None and char.trace_device == "meta"
    assert char.parameters == profile.model.parameters == 32 * 64 + 64 + 64 * 2 + 2
    assert char.per_device_batch == 16 and char.precision == "fp32" and char.optimizer == "adam"
    # Two Linear layers: forward x·W for both; backward weight grads for both and the input grad of
    # the second only (the batch does not require grad): 2·batch·(in·out) FLOPs per matmul.
    forward = 2 * 16 * (32 * 64 + 64 * 2)
    backward = 2 * 16 * (32 * 64 + 64 * 2 + 64 * 2)
    assert char.by_category()["matmul"]["flops"] == pytest.approx(forward + backward)


@pytest.mark.long
def test_characterisation_sees_keyword_inputs_and_picks_the_largest_module():
    profile = run_profile(script("kwargs_model.py"), ProfileOptions(min_iterations=6, max_iterations=8,
                                                                     validation_batches=0), quiet=True)
    char = profile.characterisation
    assert char is not None, profile.notes
    # the Encoder is the model (its inputs, its batch), not aux or normalise; aux, which the optimizer steps too,
    # is traced beside it (once a step, at its own input), so its 4 parameters add to the Encoder's
    assert char.model == "Encoder+Linear" and char.inputs == ["8x12:int64", "8x12:float32"]
    assert char.parameters == 100 * 32 + 32 * 32 + 32 + 32 * 3 + 3 + 4
    assert char.per_device_batch == 8
    assert any(r.category == "embedding" for r in char.records)


def test_no_characterise_option_skips_the_trace(full_mlp_one_epoch):
    # (a full profile is characterised too, at its end: test_full_mode_runs_to_completion checks it)
    assert full_mlp_one_epoch.characterisation is None


@pytest.mark.long
def test_allocator_settings_are_off_by_default_applied_on_request_and_recorded(monkeypatch, full_mlp_one_epoch):
    from trainwise import allocator

    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    # The job is measured as it runs: no allocator setting unless the user asks for it.
    plain = full_mlp_one_epoch
    tuned = run_profile(script("mlp_train.py", "--epochs", "1"),
                        ProfileOptions(mode="full", characterise=False, tune_allocator=True), quiet=True)
    assert allocator.launch_environment({}) == {}
    if allocator.uses_glibc():
        assert tuned.environment.allocator_env == allocator.TUNED_VARIABLES
    assert plain.environment.allocator_env == {}
    # A setting the user chose wins over trainwise's, and is what the profile records.
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    env = allocator.launch_environment({"MALLOC_TRIM_THRESHOLD_": "1048576"})
    assert env["MALLOC_TRIM_THRESHOLD_"] == "1048576"
    assert allocator.recorded_settings(env)["MALLOC_TRIM_THRESHOLD_"] == "1048576"
    assert "MALLOC_TRIM_THRESHOLD_=1048576" in allocator.describe(allocator.recorded_settings(env))
    assert allocator.describe({}) == "glibc malloc defaults"


@pytest.mark.long
def test_denormals_are_kept_by_default_and_flushed_when_asked(tmp_path):
    from trainwise import denormals

    probe = tmp_path / "denormal.txt"
    flushed = run_profile(script("mlp_train.py", "--epochs", "1", "--denormal-file", str(probe)),
                          ProfileOptions(mode="full", characterise=False, flush_denormal=True), quiet=True)
    assert probe.read_text() == "flushed"  # the script's own arithmetic, not just the flag
    assert flushed.environment.flush_denormal is True
    kept = run_profile(script("mlp_train.py", "--epochs", "1", "--denormal-file", str(probe)),
                       ProfileOptions(mode="full", characterise=False), quiet=True)
    assert probe.read_text() == "kept"  # by default the job's arithmetic is left as it is
    assert kept.environment.flush_denormal is False
    # The option decides, not a leftover variable; a process no trainwise launcher started is left alone.
    assert denormals.launch_environment({denormals.FLUSH_ENV: "1"}, flush=False)[denormals.FLUSH_ENV] == "0"
    assert denormals.apply_in_process(None, {}) is None
    assert "not recorded" in denormals.describe(None)


# The stop rule's arithmetic is unit-tested with synthetic iteration times (tests/test_agent.py); this
# end-to-end check of it runs with the long tests.
@pytest.mark.long
def test_stability_verdict_waits_for_the_minimum_sampling_time():
    # Millisecond iterations are "stable" after a handful; the verdict must still wait min_profile_seconds.
    # (--passes: epochs the profile cannot read, which would set a cost budget that stops sooner.)
    command = script("mlp_train.py", "--passes", "3", "--train-samples", "160000")
    quick = run_profile(command, ProfileOptions(min_iterations=10, min_profile_seconds=0.0, validation_batches=0,
                                                epoch2_iterations=0, characterise=False, target_relative_ci=0.5),
                        quiet=True)
    waited = run_profile(command, ProfileOptions(min_iterations=10, min_profile_seconds=1.5, validation_batches=0,
                                                 epoch2_iterations=0, characterise=False, target_relative_ci=0.5),
                         quiet=True)
    assert sampled_s(waited) >= 1.5 > sampled_s(quick)
    assert len(waited.iterations) > len(quick.iterations)
    with pytest.raises(TrainwiseError, match="--min-seconds"):
        ProfileOptions(min_profile_seconds=-1).validate()


# The stop rule's arithmetic is unit-tested with synthetic iteration times (tests/test_agent.py); this
# end-to-end check of it runs with the long tests.
@pytest.mark.long
def test_cost_budget_stops_sampling_but_not_before_its_floor():
    # A short planned run: start-up alone exceeds 2 % of it, so the cost budget ends sampling once the
    # sampled iterations used their share of it (trainwise.agent.stop_rule.SAMPLING_SHARE) without a
    # floor, after min_budget_seconds of iterations with one. (The budget arithmetic itself is unit-tested
    # in tests/test_agent.py.)
    from trainwise.agent.stop_rule import SAMPLING_SHARE

    command = script("mlp_train.py", "--epochs", "1", "--train-samples", "32000")
    common = dict(min_iterations=10, validation_batches=0, epoch2_iterations=0, characterise=False, epochs_hint=1)
    bare = run_profile(command, ProfileOptions(min_budget_seconds=0.0, **common), quiet=True)
    floored = run_profile(command, ProfileOptions(min_budget_seconds=0.8, **common), quiet=True)
    assert bare.steady_state.sampling_stopped_by == floored.steady_state.sampling_stopped_by == "cost_budget"
    predicted_s = bare.init.total_s + bare.steady_state.iteration.mean_s * 2000
    # never before min_iterations (10) either: the later of the two bounds it
    iteration_floor_s = sum(iteration.wall_s for iteration in bare.iterations[:10])
    # The share is of sampled iterations: the host-level probe after the first one is observer time, not sampling
    # (it made the first start → last end span 0.59 s for a 0.20-s share under load).
    iterations_s = sum(iteration.wall_s for iteration in bare.iterations)
    # (1.25: the share is of the run predicted when sampling stopped, from fewer iterations than the profile's mean)
    assert iterations_s < 0.8 and iterations_s <= 1.25 * max(SAMPLING_SHARE * 0.02 * predicted_s, iteration_floor_s)
    assert sampled_s(floored) >= 0.8 and len(floored.iterations) > len(bare.iterations)
    with pytest.raises(TrainwiseError, match="--min-budget-seconds"):
        ProfileOptions(min_budget_seconds=-1).validate()


def test_steady_state_with_an_unmeasurable_drift_reads_back_the_same():
    # too few steady iterations: the stopping rule's drift is inf, which JSON cannot hold (it writes null)
    from trainwise.profile.schema import Measurement, SteadyState

    spread = Measurement.of([0.1, 0.2, 0.3])
    state = SteadyState(warmup_iterations=6, iteration=spread, data_wait=spread, compute=spread, first_iteration_s=1.0,
                        stop_reason="sampled", relative_drift=float("inf"))
    assert state.relative_drift is None
    assert SteadyState.model_validate_json(state.model_dump_json()) == state
    assert SteadyState(warmup_iterations=1, iteration=spread, data_wait=spread, compute=spread, first_iteration_s=1.0,
                       stop_reason="sampled", relative_drift=0.03).relative_drift == 0.03


@pytest.mark.long
def test_zeros_in_adams_state_are_counted_and_their_square_root_timed(full_mlp_one_epoch):
    profile = run_profile(script("embedding_adam.py"), ProfileOptions(mode="full", characterise=False), quiet=True)
    zeros = profile.optimizer_state_zeros
    assert zeros is not None and zeros.optimizer == "Adam" and zeros.state == "exp_avg_sq"
    assert zeros.elements == 200_000 * 8 + 8 + 1  # embedding, linear weight and bias
    assert zeros.zero_fraction > 0.99  # 500 of 200,000 rows touched
    assert zeros.sqrt_state_ns_per_element > 0 and zeros.sqrt_normal_ns_per_element > 0
    assert zeros.step_time_at_stake_s is not None and zeros.step_time_at_stake_s >= 0
    # counted during the run too, after steps about 1.5x apart (32 steps: 16 batches x 2 epochs), in the
    # embedding only (the linear layer's state fills in at its first step)
    steps = [s for s, _ in zeros.trajectory]
    assert steps[:6] == [1, 2, 3, 4, 5, 8] and steps[-1] == 32 and zeros.steps == 32
    assert zeros.sparse_elements == 200_000 * 8
    counts = [z for _, z in zeros.trajectory]
    assert all(a >= b for a, b in zip(counts, counts[1:])) and counts[-1] == zeros.zeros
    assert zeros.square_root_timed_in == "torch.sqrt"
    # A fused Adam takes the square root in its own kernel, where a zero costs no more than a normal
    # value: timed there (a copy of its step), the speed-up at stake is a fraction of torch.sqrt's
    fused = run_profile(script("embedding_adam.py", "--fused"), ProfileOptions(mode="full", characterise=False),
                        quiet=True).optimizer_state_zeros
    assert fused is not None and fused.square_root_timed_in == "fused step" and fused.zero_fraction > 0.99
    assert fused.step_time_at_stake_s is not None and fused.step_time_at_stake_s < 0.3 * zeros.step_time_at_stake_s
    # a model whose state has no zeros to speak of is counted, not timed
    plain = full_mlp_one_epoch
    assert plain.optimizer_state_zeros is not None and plain.optimizer_state_zeros.step_time_at_stake_s is None


def test_two_optimizers_one_iteration_per_batch_and_the_whole_model_described():
    profile = run_profile(script("two_optimizers.py"), ProfileOptions(mode="full", characterise=False), quiet=True)
    # the first optimizer to step delimits iterations: one per batch, not two
    assert len(profile.iterations) == 32 and profile.dataset.iterations_per_epoch == 16
    # Both models' parameters: before, only the first optimizer's (the critic's 161 of 585), so the
    # gradient bytes a data-parallel plan all-reduces were the critic's alone.
    assert profile.model.parameters == 424 + 161
    assert profile.model.gradient_bytes == (424 + 161) * 4
    assert profile.model.optimizer == "Adam"


def test_a_second_model_that_trains_is_traced_beside_the_largest():
    # the device model's step held the generator alone (the largest model): now the critic too, called three times
    # a step (fake.detach(), real, fake), each model with its own optimizer's step
    char = run_profile(script("two_optimizers.py"), ProfileOptions(mode="full", host_noise=False),
                       quiet=True).characterisation
    assert char.parameters == 424 + 161 and char.model == "Sequential+Sequential"
    assert any("also trains: Sequential (161 parameters, inputs 16x8:float32), called 3x" in note and "its own adam"
               in note for note in char.notes)
    assert {r.op for r in char.records if r.phase == "optimizer"} == {"optimizer.sgd", "optimizer.adam"}


@pytest.mark.long
def test_an_encoder_and_a_decoder_called_apart_are_both_traced():
    # the script never calls the module holding both: before, the trace held the encoder alone (the largest called)
    char = run_profile(script("encoder_decoder_apart.py"), ProfileOptions(mode="full", host_noise=False),
                       quiet=True).characterisation
    assert char.model == "Encoder+Decoder" and char.parameters == 2_632 + 1_344
    assert char.inputs == ["16x32:float32"] and char.per_device_batch == 16
    assert any("also trains: Decoder (1,344 parameters, inputs 16x8:float32), called 1x" in note for note in char.notes)
