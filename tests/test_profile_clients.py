"""Training loops the hooks of an optimizer step and a DataLoader do not show (issue 34), profiled
unmodified: a loop that updates its parameters by hand, an LBFGS closure, a GAN, a checkpoint every
epoch, validation without a DataLoader, epoch flags under other names, a killed --full run, a script
that never trains. The event-level behaviour is unit-tested in tests/test_agent.py."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainwise.errors import TrainwiseError
from trainwise.profile.runner import ProfileOptions, run_profile
from trainwise.profile.schema import load_profile

SCRIPTS = Path(__file__).parent / "scripts"
CLIENTS = SCRIPTS / "clients"
pytestmark = pytest.mark.slow
QUICK = dict(characterise=False, host_noise=False)


def client(name: str, *args: str) -> list[str]:
    return [sys.executable, str(CLIENTS / name), *args]


# Unit-tested with synthetic event streams (tests/test_agent.py, tests/test_profile_recorder_units.py); end to end
# with the long tests.
@pytest.mark.long
def test_manual_sgd_without_optimizer_or_dataloader_is_profiled_with_its_epochs_and_validation():
    full = run_profile(client("manual_sgd_lm.py", "--epochs", "2", "--batches", "12"), ProfileOptions(mode="full", **QUICK),
                       quiet=True)
    assert len(full.iterations) == 24 and [e.iterations for e in full.epochs] == [12, 12]
    assert all(e.end_s is not None for e in full.epochs) and full.full_run.epochs_completed == 2
    assert [(v.batches_timed, v.batches_total) for v in full.validations] == [(2, 2), (2, 2)]
    assert full.dataset.iterations_per_epoch == 12 and full.model.parameters > 0 and full.model.optimizer is None
    assert full.script_epochs.epochs == 2
    assert any("backward passes that reach the model's parameters" in note for note in full.notes)
    # sampled: epoch 1 runs to its end (no DataLoader to end it early), then validation and epoch 2's start
    sampled = run_profile(client("manual_sgd_lm.py", "--epochs", "5", "--batches", "30"),
                          ProfileOptions(min_iterations=6, max_iterations=10, min_profile_seconds=0, epoch2_iterations=2,
                                         **QUICK), quiet=True)
    assert sampled.stop_reason == "sampled" and sampled.dataset.iterations_per_epoch == 30
    assert sampled.epochs[-1].iterations == 2 and sampled.validations[0].batches_total == 5


@pytest.mark.long
def test_an_epoch_without_a_dataloader_too_long_to_wait_out_is_read_from_the_loop_instead():
    # 4 epochs of 4,000 steps: waiting out epoch 1 for its end (the validation after it) would cost a quarter of the
    # run, its budget 2 %; the loop's range gives the epoch's length, and the profile stops within its budget
    sampled = run_profile(client("manual_sgd_lm.py", "--epochs", "4", "--batches", "4000"), ProfileOptions(**QUICK),
                          quiet=True)
    assert sampled.stop_reason == "sampled" and sampled.dataset.iterations_per_epoch == 4000
    assert len(sampled.iterations) < 2000 and sampled.validations == []
    assert any("read from the training loop's range" in note and "not timed" in note for note in sampled.notes)


@pytest.mark.long
def test_a_script_that_pickles_its_whole_model_saves_a_model_without_the_recorder(tmp_path):
    saved = tmp_path / "model.pt"
    full = run_profile(client("manual_sgd_lm.py", "--epochs", "2", "--batches", "12", "--save", str(saved)),
                       ProfileOptions(mode="full", **QUICK), quiet=True)
    assert full.exit_code == 0 and full.full_run.epochs_completed == 2
    # the checkpoint loads where trainwise is not installed, and carries no hook of the recorder
    check = ("import __main__, torch\nclass RNNModel(torch.nn.Module): pass\n__main__.RNNModel = RNNModel\n"
             f"m = torch.load({str(saved)!r}, weights_only=False)\nprint(len(m._forward_pre_hooks))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-I", "-c", check], env=env, capture_output=True, text=True,
                         cwd=CLIENTS, check=True)
    assert out.stdout.strip() == "0" and b"trainwise" not in saved.read_bytes()


@pytest.mark.long
def test_lbfgs_closure_is_one_iteration_per_step():
    profile = run_profile(client("lbfgs_closure.py", "--n_epochs", "3"), ProfileOptions(mode="full", **QUICK), quiet=True)
    assert len(profile.iterations) == 3 and profile.model.optimizer == "LBFGS"
    assert profile.script_epochs.epochs == 3 and profile.dataset.iterations_per_epoch == 1
    # each step's closure evaluations are counted (the script's max_iter is 6), and the steady state pools
    # the one-iteration epochs instead of keeping epoch 1's cold first step alone
    assert profile.model.closure_evaluation_cap == 6
    assert all(1 <= it.backward_passes <= 7 for it in profile.iterations)
    assert profile.steady_state.iteration.n == 2 and profile.steady_state.epoch_start_extra_s is None


def test_a_loop_bound_by_an_unknown_flag_gives_its_range_as_the_step_budget():
    # `--steps` is read as neither epochs nor a step budget (a rollout's length elsewhere); the loop around the
    # optimizer step holds each epoch's validation, and its counter counts every iteration: its range is the run
    profile = run_profile([sys.executable, str(SCRIPTS / "steps_loop.py"), "--steps", "100000"],
                          ProfileOptions(**QUICK), quiet=True)
    assert profile.script_epochs is None and profile.dataset.iterations_per_epoch == 1
    assert profile.script_iterations.iterations == 100_000
    assert "range(args.steps)" in profile.script_iterations.source and "steps_loop.py" in profile.script_iterations.source


@pytest.mark.long
def test_the_workload_trace_adds_no_iteration_and_no_backward(tmp_path):
    # the characterisation traces a training step on a meta-device copy after the first iteration: its
    # backward pass must not end an iteration of a loop without an optimizer (an epoch of 13 batches, not 12)
    profile = run_profile(client("manual_sgd_lm.py", "--epochs", "3", "--batches", "12"),
                          ProfileOptions(min_iterations=6, max_iterations=10, min_profile_seconds=0, epoch2_iterations=2,
                                         host_noise=False), quiet=True)
    assert profile.characterisation is not None
    assert profile.dataset.iterations_per_epoch == 12 and [e.iterations for e in profile.epochs] == [12, 2]
    assert [it.backward_passes for it in profile.iterations] == [1] * 14
    # no DataLoader counts its samples: the traced input's batch dimension does (16 sequences of a
    # sequence-first LSTM batch), the profile says so, and the written profile reads back
    assert profile.dataset.global_batch_size == profile.characterisation.per_device_batch == 16
    assert any("the batch dimension of the model's traced input" in note for note in profile.notes)
    path = tmp_path / "p.json"
    path.write_text(profile.model_dump_json())
    assert load_profile(path).dataset.global_batch_size == 16


@pytest.mark.long
@pytest.mark.parametrize("mode, activations_kept", [("accumulate", 1), ("rollout", 5)])
def test_a_step_of_several_model_calls_without_a_dataloader_is_traced_as_all_of_them(mode, activations_kept):
    # nanoGPT's micro-steps, REINFORCE's per-action policy calls: the device model must run every pass, and the
    # samples per step are all the calls' (the script's no_grad call after each step is not a training pass)
    command = client("several_passes.py", "--mode", mode, "--calls", "5", "--steps", "400")
    profile = run_profile(command, ProfileOptions(min_iterations=20, max_iterations=40, min_profile_seconds=0,
                                                  host_noise=False), quiet=True)
    char, batch = profile.characterisation, 8 if mode == "accumulate" else 1
    assert char is not None and char.passes_per_step == 5 and char.traced_batch == batch
    assert profile.dataset.global_batch_size == char.per_device_batch == 5 * batch
    assert [it.backward_passes for it in profile.iterations][1:4] == [5 if mode == "accumulate" else 1] * 3
    single = run_profile([*command[:-2], "--calls", "1", "--steps", "400"],
                         ProfileOptions(min_iterations=20, max_iterations=40, min_profile_seconds=0, host_noise=False),
                         quiet=True).characterisation
    assert single.passes_per_step == 1
    assert char.activation_bytes == activations_kept * single.activation_bytes
    assert char.total_flops("forward") == pytest.approx(5 * single.total_flops("forward"))


@pytest.mark.long
def test_a_loop_with_no_length_in_its_header_is_read_from_its_exit_or_told_within_seconds():
    # `for step in count(1)` leaving at `step >= args.updates`: the run's steps, above a flag the loop does not test
    steps = run_profile(client("unbounded_loop.py", "--until", "steps", "--max-steps", "1000000"), ProfileOptions(**QUICK),
                        quiet=True)
    assert steps.stop_reason == "sampled" and steps.dataset.iterations_per_epoch == 200_000
    assert steps.script_iterations.iterations == 200_000 and "`step >= args.updates`" in steps.script_iterations.source
    assert any(note.startswith("the training loop runs 200,000 optimizer steps") and "max_steps=1000000" in note
               for note in steps.notes)
    # REINFORCE-style: leaves when a running reward passes a threshold; neither its 600-s cap nor --max-epoch-wait's
    # 600 s is waited for
    started = time.monotonic()
    reward = run_profile(client("unbounded_loop.py", "--until", "reward", "--seconds", "600"), ProfileOptions(**QUICK),
                         quiet=True)
    assert time.monotonic() - started < 150
    assert reward.stop_reason == "sampled_no_dataloader" and reward.script_iterations is None
    assert any("has no length in its code: it ends when `running_reward > args.threshold`" in note for note in reward.notes)


@pytest.mark.long
@pytest.mark.parametrize("counter", ["index", "global", "limit"])
def test_a_stream_without_length_takes_its_epoch_from_the_loops_exit(counter):
    # an IterableDataset: the DataLoader has no length; before, predict asked for --iterations-per-epoch. `limit`:
    # a sized loader of 40,000 batches whose passes the loop cuts at 30,000 (before: epochs of 40,000; at 3,000 of
    # 4,000 sampling sometimes ran past the cut, 1 run in 4)
    from trainwise.predict.epochs import decide_epochs

    updates = 30_000
    profile = run_profile(client("stream_loop.py", "--counter", counter, "--updates", str(updates), "--rounds", "2"),
                          ProfileOptions(**QUICK), quiet=True)
    assert profile.dataset.iterations_per_epoch == updates
    said = "the training loop leaves each pass" if counter == "limit" else "the training DataLoader has no length"
    assert any(note.startswith(said) for note in profile.notes)
    decision = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                             profiles=[("p", profile)], what="epochs")
    if counter == "global":
        assert profile.script_iterations.iterations == 30_000 and decision.headline == 1
    else:
        assert profile.script_iterations is None and "`i >= args.updates - 1`" in " ".join(profile.notes)


@pytest.mark.long
def test_a_finite_stream_is_read_to_the_end_of_its_pass_to_count_the_epoch_and_its_validation():
    # a DataLoader over a finite IterableDataset (webdataset's kind), `for x, y in loader` with nothing else to read:
    # before, sampling cut the pass and predict asked for --iterations-per-epoch; the validation stream was cut after
    # its 10 timed batches and taken as 10 batches long
    from trainwise.predict.same_machine import trainwise_estimate

    profile = run_profile(client("stream_loop.py", "--counter", "none", "--samples", "160000", "--rounds", "3"),
                          ProfileOptions(**QUICK), quiet=True)
    assert profile.stop_reason in ("sampled", "validation_timed") and profile.dataset.iterations_per_epoch == 10_000
    assert any("ended after 10,000 batches" in note for note in profile.notes)
    assert profile.validations and profile.validations[0].batches_total == 500
    assert profile.validations[0].batches_timed == 500
    estimate = trainwise_estimate(profile, 3)
    assert estimate.total_s > 3 * 10_000 * profile.steady_state.iteration.mean_s


@pytest.mark.long
@pytest.mark.parametrize("ratio", ["1.5", "0.5"])
def test_two_training_loaders_zipped_make_epochs_of_the_shorter_pass(ratio):
    # zip(source_loader, target_loader): before, the first loader's pass was taken for a look at a batch and then for
    # validation (a 1-batch pass each step), and the epoch was the second loader's length (938, not 625)
    profile = run_profile(client("zipped_loaders.py", "--ratio", ratio), ProfileOptions(**QUICK), quiet=True)
    assert profile.dataset.iterations_per_epoch == (625 if ratio == "1.5" else 313)
    assert any(note.startswith("a second training DataLoader drawn in lockstep") for note in profile.notes)
    assert len({v.loader for v in profile.validations}) == 1 and profile.validations[0].batches_total == 32
    assert profile.dataset.global_batch_size == 32


@pytest.mark.long
@pytest.mark.parametrize("single, eval_step", [(True, 300), (False, 300), (False, 40)])
def test_a_range_of_steps_over_iterators_begun_again_is_the_epoch_whatever_the_loaders_passes(single, eval_step):
    # FixMatch's loop: before, the labelled loader's 125-batch passes were the epochs and the range, its position
    # matching the run's count, was read as the run's 300 steps (a third of the 900 the script runs); with the
    # unlabelled loader beside it, each restart of the labelled one was then a validation pass
    from trainwise.predict.epochs import decide_epochs

    # (40: sampling always goes on past the range's first run, as it may for 300 on a loaded host)
    profile = run_profile(client("restarted_iterators.py", "--eval-step", str(eval_step), "--epochs", "30",
                                 *(["--single"] if single else [])), ProfileOptions(**QUICK), quiet=True)
    assert profile.dataset.iterations_per_epoch == eval_step and profile.script_iterations is None
    assert any(f"{eval_step} iterations an epoch, drawn with next()" in note for note in profile.notes)
    assert not any("timed as validation" in note for note in profile.notes)
    assert all(v.batches_total == 16 for v in profile.validations)  # the test loader's, if timed
    decision = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                             profiles=[("p", profile)], what="epochs")
    assert decision.headline == 30


@pytest.mark.long
def test_an_epoch_loop_that_stops_early_is_named_where_the_scripts_epochs_are_taken():
    from trainwise.predict.epochs import decide_epochs

    profile = run_profile(client("early_stopping.py"), ProfileOptions(**QUICK), quiet=True)
    assert profile.epoch_loop_exits.tests == ["bad_epochs >= args.patience or validation_loss < args.target"]
    assert profile.epoch_loop_exits.where.endswith("for epoch in range(args.epochs)")
    decision = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                             profiles=[("p", profile)], what="epochs")
    assert decision.headline == 50 and "also leaves on `bad_epochs >= args.patience or" in decision.says


@pytest.mark.long
def test_batches_drawn_with_next_from_cycled_loaders_run_the_loops_range_and_validate_a_batch_at_a_time():
    # lucidrains' loop (x-transformers' train_enwik8.py): `for i in tqdm.tqdm(range(N))` drawing from endless
    # cycle()s over a 62,500-batch training loader and a validation loader, one validation batch every 10 steps.
    # Before: an epoch of the loader's 31,250 iterations and no step count (predict offered 5, 10 or 20 of them), each
    # validation "pass" the whole validation loader at the time of ten training steps a batch, those steps counted
    # in the iterations as well, and no steady verdict before the 60-s cap.
    from trainwise.predict.epochs import decide_epochs
    from trainwise.predict.same_machine import trainwise_estimate, validation_passes_per_epoch

    profile = run_profile(client("cycled_loader.py", "--batches", "20000"), ProfileOptions(**QUICK), quiet=True)
    assert profile.script_iterations.iterations == 20_000
    assert profile.script_iterations.source.startswith("the training loop's range (cycled_loader.py:")
    validations = profile.validations
    assert len(validations) >= 3 and all(v.batches_timed == 1 and v.batches_total == 1 for v in validations)
    assert all(v.continued for v in validations[1:8])  # the same iterator, a batch at a time
    assert validation_passes_per_epoch(profile, 20_000) == (2_000, 10)
    decision = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                             profiles=[("p", profile)], what="epochs")
    assert decision.headline == 1 and decision.iterations_per_epoch == 20_000
    # each validation (20 forwards of a 512-row batch) costs several training steps; none is in a step
    one_validation_s = statistics.median(v.batch_wall_s[0] for v in validations[1:])
    assert one_validation_s > 2 * profile.steady_state.iteration.median_s
    # a step holding a validation would put one step in ten above this; a stall of the host may put one in a thousand
    # (a single 16-ms step of 2,097 in a fresh-clone CI run, 2026-12-01)
    walls = profile.iterations.column("wall_s")
    held = sum(w > one_validation_s + profile.steady_state.iteration.median_s for w in walls[2:])
    assert held <= 0.01 * len(walls)
    assert profile.process_wall_s < 45  # sampled, not the whole ~60-s run
    estimate = trainwise_estimate(profile, 1, iterations_per_epoch=20_000)
    assert estimate.breakdown_s["validation_s"] == pytest.approx(2_000 * one_validation_s, rel=0.5)


@pytest.mark.long
@pytest.mark.parametrize("samples, epochs", [(200_000, (4, 4)), (400, (1_500, 1_700))])
def test_a_trainer_class_counting_its_own_steps_runs_to_its_while_loops_bound(samples, epochs):
    # lucidrains' denoising-diffusion-pytorch Trainer: `while self.step < self.train_num_steps:` over next() batches
    # from a cycled loader; before, no step count (the counter an attribute, the loop not the loader's). With 400
    # samples the cycle starts the loader's pass every 12.5 steps, and the count is the run's, not a pass's.
    from trainwise.predict.epochs import decide_epochs

    profile = run_profile(client("trainer_class.py", "--train-num-steps", "20000", "--samples", str(samples)),
                          ProfileOptions(**QUICK), quiet=True)
    assert profile.script_iterations.iterations == 20_000
    assert "`self.step >= self.train_num_steps`" in profile.script_iterations.source
    decision = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                             profiles=[("p", profile)], what="epochs")
    # the loader's passes (6,250 steps, or 12.5: the profile's epochs of 12 or 13) started again by the cycle
    assert epochs[0] <= decision.headline <= epochs[1]
    assert decision.headline * (decision.iterations_per_epoch or profile.dataset.iterations_per_epoch) >= 20_000


@pytest.mark.long
def test_gan_with_two_optimizers_is_one_iteration_per_pair_of_steps():
    profile = run_profile(client("gan_two_optimizers.py", "--niter", "1", "--samples", "320"),
                          ProfileOptions(mode="full", **QUICK), quiet=True)
    assert len(profile.iterations) == 10 and profile.dataset.iterations_per_epoch == 10
    assert profile.script_epochs.epochs == 1 and profile.script_epochs.source.endswith("niter=1")
    g_and_d = (16 * 256 + 256 + 256 * 64 + 64) + (64 * 256 + 256 + 256 + 1)
    assert profile.model.parameters == g_and_d


@pytest.mark.long
def test_a_checkpoint_every_epoch_still_gets_epoch_2s_start(tmp_path):
    checkpoint = tmp_path / "model_epoch.pth"
    profile = run_profile(client("checkpoint_every_epoch.py", "--nEpochs", "20", "--samples", "3200",
                                 "--checkpoint", str(checkpoint)),
                          ProfileOptions(min_iterations=8, max_iterations=10, min_profile_seconds=0, validation_batches=2,
                                         epoch2_iterations=3, **QUICK), quiet=True)
    assert profile.stop_reason == "sampled" and profile.script_epochs.epochs == 20
    assert profile.epochs[0].truncated and profile.epochs[1].iterations == 3
    assert not checkpoint.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.long
def test_validation_over_tensors_is_seen_beside_a_training_dataloader():
    profile = run_profile(client("tensor_validation.py", "--num-epochs", "2", "--samples", "320"),
                          ProfileOptions(mode="full", **QUICK), quiet=True)
    assert [e.iterations for e in profile.epochs] == [10, 10] and profile.script_epochs.epochs == 2
    assert [(v.batches_timed, v.batches_total) for v in profile.validations] == [(8, 8), (8, 8)]
    # the validation pass is in neither training iteration around it
    before, after, validation = profile.iterations[9], profile.iterations[10], profile.validations[0]
    assert before.start_s + before.wall_s <= validation.start_s <= after.start_s


# The watchdog is unit-tested (tests/test_agent.py); end to end with the long tests.
@pytest.mark.long
def test_a_script_that_never_trains_is_told_so_within_seconds():
    started = time.monotonic()
    with pytest.raises(TrainwiseError, match="no training iteration within 3 s of the script's first forward pass"):
        run_profile([sys.executable, str(SCRIPTS / "inference_only.py"), "600"],
                    ProfileOptions(no_iteration_limit_s=3, **QUICK), quiet=True)
    assert time.monotonic() - started < 60


@pytest.mark.long
def test_a_killed_full_run_reports_what_it_recorded(tmp_path, monkeypatch):
    """kill -9 of the job once it has recorded a while: the record written every few seconds is its profile."""
    import tempfile
    import threading

    import trainwise.profile.runner as runner

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the runner's work folder, to watch its record
    real_popen = subprocess.Popen

    def popen_then_kill(*args, **kwargs):
        process = real_popen(*args, **kwargs)

        def kill_once_recorded():
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and not list(tmp_path.glob("trainwise-profile-*/raw.json")):
                time.sleep(0.2)
            time.sleep(1.0)
            os.killpg(process.pid, signal.SIGKILL)

        threading.Thread(target=kill_once_recorded, daemon=True).start()
        return process

    monkeypatch.setattr(runner.subprocess, "Popen", popen_then_kill)
    profile = run_profile(client("manual_sgd_lm.py", "--epochs", "1000", "--batches", "10"),
                          ProfileOptions(mode="full", **QUICK), quiet=True)
    assert profile.exit_code == -signal.SIGKILL and profile.stop_reason == "interrupted"
    assert len(profile.iterations) >= 1 and profile.full_run is not None
    assert any("killed by signal 9" in note for note in profile.notes)


@pytest.mark.long
def test_training_in_spawned_worker_processes_is_profiled_in_the_first_to_train():
    # mnist_hogwild's shape: the parent only parses, builds and joins; the workers train (trainwise.profile._ownership)
    started = time.monotonic()
    sampled = run_profile(client("spawned_workers.py", "--epochs", "200", "--batches", "400"),
                          ProfileOptions(min_iterations=20, averaging_seconds=0, **QUICK), quiet=True)
    assert sampled.stop_reason == "sampled" and sampled.dataset.iterations_per_epoch == 400
    assert sampled.script_epochs.epochs == 200 and "process that started this one" in sampled.script_epochs.source
    assert any("process the script started" in note for note in sampled.notes)
    assert any("other processes still ran" in note for note in sampled.notes)
    assert time.monotonic() - started < 60  # not the 200 epochs the other worker would have trained
    full = run_profile(client("spawned_workers.py", "--epochs", "2", "--batches", "50"), ProfileOptions(mode="full", **QUICK),
                       quiet=True)
    assert len(full.iterations) == 100 and full.full_run.epochs_completed == 2 and full.exit_code == 0
    # forked workers end with os._exit (no atexit): the owner writes its record as multiprocessing ends it
    forked = run_profile(client("spawned_workers.py", "--epochs", "2", "--batches", "50", "--start-method", "fork"),
                         ProfileOptions(mode="full", **QUICK), quiet=True)
    assert len(forked.iterations) == 100 and forked.full_run.epochs_completed == 2 and forked.stop_reason != "interrupted"


@pytest.mark.long
def test_a_ddp_job_under_torchrun_is_profiled_in_its_first_rank_to_train(tmp_path):
    # torchrun imports torch and trains nothing; its workers are new interpreters: one owns the profile, and the
    # job (torchrun, the other rank, blocked in its all-reduce) is ended once that rank's record is written
    torchrun = Path(sys.executable).with_name("torchrun")
    argv = [str(torchrun), "--nproc_per_node", "2", str(SCRIPTS / "ddp_train.py"), "--out", str(tmp_path / "w.pt"),
            "--epochs", "100", "--samples", "4096"]
    started = time.monotonic()
    profile = run_profile(argv, ProfileOptions(averaging_seconds=0, **QUICK), quiet=True)
    assert profile.stop_reason == "sampled" and profile.dataset.iterations_per_epoch == 256  # 4096 / (8 x 2 ranks)
    assert profile.script_epochs.epochs == 100 and profile.exit_code == 0
    assert any("process the script started" in note for note in profile.notes)
    assert time.monotonic() - started < 60 and not (tmp_path / "w.pt").exists()
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert leftovers == []


@pytest.mark.long
def test_a_step_budget_set_by_module_level_settings_gives_the_runs_epochs():
    """nanoGPT's shape: `--max_iters=600` sets a global; validation every 50 iterations makes the epochs."""
    from trainwise.predict.epochs import decide_epochs

    profile = run_profile(client("step_budget_lm.py", "--max_iters=600"),
                          ProfileOptions(min_iterations=6, max_iterations=30, min_profile_seconds=0, epoch2_iterations=2,
                                         **QUICK), quiet=True)
    assert profile.script_iterations.iterations == 600
    assert profile.script_iterations.source == "the script's module-level max_iters = 600"
    assert profile.dataset.iterations_per_epoch == 50 and profile.script_epochs is None
    decision = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                             profiles=[("p", profile)], what="epochs")
    assert decision.headline == 12


@pytest.mark.long
def test_a_step_budget_without_validation_is_one_epoch_after_a_tenth_of_it():
    """No DataLoader and no validation region: the profile stops waiting for an epoch end after a tenth of
    the script's 600 steps, the steps being the run (before: it waited --max-epoch-wait or the whole run)."""
    from trainwise.predict.epochs import decide_epochs

    profile = run_profile(client("step_budget_lm.py", "--max_iters=600", "--eval_interval=100000"),
                          ProfileOptions(min_iterations=6, max_iterations=30, min_profile_seconds=0, epoch2_iterations=2,
                                         **QUICK), quiet=True)
    assert profile.stop_reason == "sampled" and 60 <= len(profile.iterations) <= 62
    assert profile.dataset.iterations_per_epoch == 600 and not profile.validations
    assert any("600 optimizer steps (the script's module-level max_iters = 600) are taken as one epoch" in note
               for note in profile.notes)
    decision = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                             profiles=[("p", profile)], what="epochs")
    assert decision.headline == 1


@pytest.mark.long
def test_a_validation_due_right_after_a_tenth_of_the_step_budget_is_still_seen():
    """nanoGPT at 2,500 steps estimates its loss every 250th: the wait for an epoch's end (a tenth of the steps) must
    not end one step before that validation."""
    profile = run_profile(client("step_budget_lm.py", "--max_iters=600", "--eval_interval=60"),
                          ProfileOptions(min_iterations=6, max_iterations=30, min_profile_seconds=0, epoch2_iterations=2,
                                         **QUICK), quiet=True)
    assert profile.dataset.iterations_per_epoch == 60 and profile.validations


@pytest.mark.long
def test_a_smoke_test_subprocess_that_trains_briefly_gives_the_profile_up():
    """Its 3 steps owned the profile and, at its exit, would have been the profile (the launcher ending the job):
    a process the script started that ends before sampling could finish gives ownership up."""
    profile = run_profile(client("smoke_test_first.py", "--epochs", "50", "--batches", "300"),
                          ProfileOptions(min_iterations=20, averaging_seconds=0, **QUICK), quiet=True)
    assert profile.stop_reason == "sampled" and profile.dataset.iterations_per_epoch == 300
    assert profile.script_epochs.epochs == 50 and len(profile.iterations) >= 20
    assert not any("process the script started" in note for note in profile.notes)
