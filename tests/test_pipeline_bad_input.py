"""Pipeline bad input: failing steps, non-deterministic steps before the split, full disk, unwritable
output, unknown specs; and the reference pipelines on a few real encoded samples; the CLI."""

from __future__ import annotations

import errno
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest

from trainwise.cli import main
from trainwise.errors import TrainwiseError
from trainwise.pipeline import Pipeline, SequenceSource, Step, Strategy
from trainwise.pipeline.materialise import MANIFEST, materialise, strategy_dir
from trainwise.pipeline.reference import reference_pipeline


def picky(n: int = 10) -> Pipeline:
    def parse(sample):
        value = int(sample["data"])
        if value % 4 == 3:
            raise ValueError(f"odd record {value}")
        return {"__key__": sample["__key__"], "x": np.full(3, value, dtype=np.float32)}

    return Pipeline("picky", SequenceSource(list(range(n)), storage_bytes=n * 8),
                    [Step("parse", parse), Step("shuffle_noise", lambda s: s, deterministic=False), Step("late", lambda s: s)])


def test_failing_step_names_sample_and_step_or_is_skipped_and_counted(tmp_path):
    with pytest.raises(TrainwiseError, match=r"step 'parse' failed on sample '00000003' \(source index 3\): ValueError: odd record 3.*--skip-errors"):
        materialise(picky(), Strategy(split=1, shards=2, workers=0), tmp_path)
    directory, manifest = materialise(picky(), Strategy(split=1, shards=2, workers=0), tmp_path, skip_errors=True)
    assert manifest.samples == 8 and manifest.skipped_count == 2 and manifest.skipped_by_step == {"parse": 2}
    assert [s.index for s in manifest.skipped_examples] == [3, 7]


def test_non_deterministic_step_before_the_split_is_rejected(tmp_path):
    with pytest.raises(TrainwiseError, match="step 'shuffle_noise' .* not deterministic .* split ≤ 1"):
        materialise(picky(), Strategy(split=2, shards=2, workers=0), tmp_path)
    assert not (tmp_path / "picky").exists()  # rejected before anything was written
    with pytest.raises(TrainwiseError, match="not deterministic"):
        Strategy.parse("m3-npy-none-s2-w0p-none").check(picky())


def test_full_disk_gives_a_clean_error_and_no_partial_strategy(tmp_path, monkeypatch):
    real_addfile = tarfile.TarFile.addfile
    written = {"n": 0}

    def addfile(self, tarinfo, fileobj=None):
        written["n"] += 1
        if written["n"] > 4:  # the disk fills up during the second shard
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_addfile(self, tarinfo, fileobj)

    monkeypatch.setattr(tarfile.TarFile, "addfile", addfile)
    strategy = Strategy(split=1, shards=2, workers=0)
    with pytest.raises(TrainwiseError, match=r"disk full while writing shard-00001.tar .*no manifest was written") as info:
        materialise(picky(8), strategy, tmp_path, skip_errors=True)
    assert "\n" not in str(info.value)
    directory = strategy_dir(tmp_path, picky(8), strategy)
    assert not (directory / MANIFEST).exists()
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_free_space_guard_stops_before_writing_a_shard_that_cannot_fit(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10_000, 9_990, 10))
    with pytest.raises(TrainwiseError, match="disk full while writing shard-00001.tar .*needed for the next shard"):
        materialise(picky(8), Strategy(split=1, shards=2, workers=0), tmp_path, skip_errors=True)


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(TrainwiseError, match="cannot write to output directory .*a-file/out.*writable --output-dir"):
        materialise(picky(), Strategy(split=1, shards=2, workers=0), blocker / "out", skip_errors=True)
    if os.geteuid() != 0:  # root ignores permission bits
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(TrainwiseError, match="cannot write to output directory"):
            materialise(picky(), Strategy(split=1, shards=2, workers=0), locked, skip_errors=True)


def test_unstorable_field_is_rejected_without_pickle(tmp_path):
    pipeline = Pipeline("obj", SequenceSource([1, 2]), [Step("wrap", lambda s: {**s, "data": object()})])
    with pytest.raises(TrainwiseError, match="cannot store a object field without pickle"):
        materialise(pipeline, Strategy(split=1, shards=1, workers=0), tmp_path)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("reference-data")


def test_reference_pipelines_make_real_encoded_data_and_run(data_dir):
    import soundfile
    from PIL import Image

    cv = reference_pipeline("cv", data_dir, 4)
    suffixes = {p.suffix for p in cv.source.file_paths()}
    assert suffixes <= {".jpg", ".png"}
    with Image.open(cv.source.file_paths()[0]) as image:
        assert image.format in ("JPEG", "PNG")
    out = cv.run_steps(cv.source[0], 0)
    assert out["image"].shape == (3, 224, 224) and out["image"].dtype == np.float32
    assert [s.deterministic for s in cv.steps] == [True, True, True, False]

    nlp = reference_pipeline("nlp", data_dir, 6)
    text = nlp.run_steps(nlp.source[0], 0, 1)["text"]
    assert "<" not in text and "&amp;" not in text
    tokens = nlp.run_steps(nlp.source[0], 0, 2)["tokens"]
    assert tokens.dtype == np.int32 and 0 < len(tokens) <= 512 and tokens.max() < 4000
    assert nlp.run_steps(nlp.source[0], 0)["embedding"].shape == (len(tokens), 256)

    audio = reference_pipeline("audio", data_dir, 4)
    info = soundfile.info(str(audio.source.file_paths()[0]))
    assert info.samplerate == 16000 and info.format in ("FLAC", "WAV")
    wave = audio.run_steps(audio.source[0], 0, 1)["waveform"]
    mel = audio.run_steps(audio.source[0], 0, 2)["mel"]
    assert mel.shape == (80, len(wave) // 160 + 1)  # 80 bins, 10 ms hop (centred frames)

    nilm = reference_pipeline("nilm", data_dir, 7)
    assert len(nilm.source) == 7
    signals = nilm.run_steps(nilm.source[0], 0, 1)["signals"]
    assert signals.shape == (2, 10_000) and signals.dtype == np.float64
    aggregates = nilm.run_steps(nilm.source[0], 0)["aggregates"]
    assert aggregates.shape == (500, 5)
    assert np.allclose(aggregates[:, 0], 230, rtol=0.02)  # RMS of a 230 V mains voltage
    np.testing.assert_allclose(aggregates[:, 4], np.cumsum(aggregates[:, 2]) / 50, rtol=1e-4)


def test_mel_filterbank_is_triangular_on_the_mel_scale():
    from trainwise.pipeline.reference.audio import N_FFT, N_MELS, mel_filterbank

    bank = mel_filterbank()
    assert bank.shape == (N_MELS, N_FFT // 2 + 1)
    assert (bank >= 0).all() and bank.max() <= 1.0 + 1e-6
    peaks = bank.argmax(axis=1)
    assert (np.diff(peaks) >= 0).all()  # centres increase


def test_power_spectrogram_matches_torch_stft():
    """The numpy STFT (fork-safe; see the audio module) gives torch.stft's frames to float32 rounding."""
    import torch

    from trainwise.pipeline.reference.audio import HOP, N_FFT, WINDOW, power_spectrogram

    rng = np.random.default_rng(3)
    for length in (1_000, 32_037, 52_382):
        wave = rng.normal(size=length).astype(np.float32)
        reference = torch.stft(torch.from_numpy(wave), n_fft=N_FFT, hop_length=HOP, win_length=WINDOW,
                               window=torch.hann_window(WINDOW), center=True, return_complex=True).abs().pow(2).numpy()
        ours = power_spectrogram(wave)
        assert ours.shape == reference.shape == (N_FFT // 2 + 1, length // HOP + 1)
        assert np.abs(ours - reference).max() <= 1e-5 * reference.max()


def test_cli_apply_and_profile_and_errors(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    common = ["--data-dir", str(data_dir), "--size", "7", "--output-dir", str(out)]
    assert main(["pipeline", "apply", "nilm", "--strategy", "m2-npy-zstd-s2-w0p-app", *common]) == 0
    printed = capsys.readouterr().out
    assert "make_dataloader" in printed and "7 samples" in printed
    assert main(["pipeline", "profile", "nilm", *common, "--splits", "2", "--compression", "none", "--workers", "0",
                 "--cache", "app", "--min-seconds", "0.05", "--json", str(tmp_path / "p.json")]) == 0
    printed = capsys.readouterr().out
    assert "best (presto" in printed and (tmp_path / "p.json").exists()
    assert main(["pipeline", "apply", "nilm", "--strategy", "m9-npy-none-s2-w0p-app", *common]) == 2
    assert "outside 0..2" in capsys.readouterr().err
    assert main(["pipeline", "profile", "nosuch", *common]) == 2
    assert "unknown pipeline 'nosuch'" in capsys.readouterr().err
    assert main(["pipeline", "profile", "nilm", *common, "--weights", "1,2"]) == 2
    assert "three numbers" in capsys.readouterr().err


def test_cli_loads_a_user_pipeline_from_file_function(tmp_path, capsys):
    script = tmp_path / "my_pipe.py"
    script.write_text(
        "import numpy as np\n"
        "from trainwise.pipeline import Pipeline, Step\n"
        "def build():\n"
        "    return Pipeline.from_dataset([np.ones(4) * i for i in range(6)], [Step('double', lambda s: {**s, 'data': s['data'] * 2})], name='mine')\n")
    assert main(["pipeline", "apply", f"{script}:build", "--strategy", "m1-npy-gzip-s2-w0p-none", "--output-dir", str(tmp_path / "o")]) == 0
    assert "6 samples" in capsys.readouterr().out
    assert main(["pipeline", "apply", f"{script}:nothing", "--strategy", "m1-npy-gzip-s2-w0p-none"]) == 2
    assert "has no attribute 'nothing'" in capsys.readouterr().err


def test_skip_errors_covers_a_failing_step_that_runs_online(tmp_path):
    from dataclasses import replace

    from trainwise.pipeline.profiler import measure_online

    online = Strategy(materialised=False, split=0, workers=0, cache="none")
    with pytest.raises(TrainwiseError, match="step 'parse' failed"):
        measure_online(picky(), online, min_seconds=0.0, max_epochs=1)
    result = measure_online(replace(picky(), skip_online_errors=True), online, min_seconds=0.0, max_epochs=1)
    assert result["measured_epochs"] == 1 and result["throughput_sps"] > 0
    # a materialised strategy whose online part fails (split 0 keeps `parse` online)
    manifest = materialise(picky(), Strategy(split=0, shards=2, workers=0), tmp_path)
    assert replace(picky(), skip_online_errors=True).with_source(picky().source).skip_online_errors
    result = measure_online(replace(picky(), skip_online_errors=True), Strategy(split=0, shards=2, workers=0), manifest,
                            min_seconds=0.0, max_epochs=1)
    assert result["throughput_sps"] > 0


def test_cli_bad_builder_and_worker_kind_are_one_line_errors(tmp_path, capsys):
    script = tmp_path / "raising_pipe.py"
    script.write_text("def build():\n    raise RuntimeError('user code failed')\n")
    assert main(["pipeline", "profile", f"{script}:build", "--output-dir", str(tmp_path / "o")]) == 2
    assert "build() raised RuntimeError: user code failed" in capsys.readouterr().err
    assert main(["pipeline", "profile", "cv", "--size", "tiny", "--worker-kinds", "fiber",
                 "--output-dir", str(tmp_path / "o"), "--data-dir", str(tmp_path / "d")]) == 2
    assert "unknown worker kind 'fiber'" in capsys.readouterr().err


def test_outputs_that_cannot_be_written_are_refused_before_the_profiling(tmp_path, capsys, monkeypatch):
    import trainwise.pipeline.profiler as profiler

    script = tmp_path / "my_pipe.py"
    source = ("import numpy as np\n"
              "from trainwise.pipeline import Pipeline, Step\n"
              "def build():\n"
              "    return Pipeline.from_dataset([np.ones(4) * i for i in range(6)], [Step('keep', lambda s: s)], name='mine')\n")
    script.write_text(source)
    (tmp_path / "a_folder").mkdir()
    training = tmp_path / "job.json"
    training.write_text("{}")

    def must_not_run(*args, **kwargs):
        raise AssertionError("profiled before the outputs were checked")

    monkeypatch.setattr(profiler, "profile_pipeline", must_not_run)
    monkeypatch.setattr(profiler, "measure_read_bandwidth", must_not_run)
    out = ["--output-dir", str(tmp_path / "o")]
    cases = [(["--json", str(script)], "would overwrite the input"),
             (["--json", str(training), "--training-profile", str(training), "--accelerator", "A100"], "would overwrite the input"),
             (["--json", str(tmp_path / "a_folder")], "is a folder"),
             (["--json", str(script / "p.json")], "is a file, not a folder"),
             (["--output-dir", str(script)], "--output-dir"),
             (["--output-dir", str(script / "o")], "is a file, not a folder")]
    if Path("/proc/self").is_dir():
        cases += [(["--json", "/proc/p.json"], "cannot write in /proc"), (["--output-dir", "/proc/o"], "cannot write in /proc")]
    for options, message in cases:
        code = main(["pipeline", "profile", f"{script}:build", *out, *options])
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, (options, err)
        assert len(err.strip().splitlines()) == 1, err
    assert script.read_text() == source and training.read_text() == "{}"
    # apply: its --output-dir too, before anything is materialised
    for directory, message in [(script, "is a file, not a folder"), (Path("/proc/o"), "cannot write in /proc")]:
        code = main(["pipeline", "apply", f"{script}:build", "--strategy", "m1-npy-none-s1-w0p-none", "--output-dir", str(directory)])
        captured = capsys.readouterr()
        assert code == 2 and message in captured.err and "materialising" not in captured.out + captured.err, captured
    assert script.read_text() == source


@pytest.mark.parametrize("body, fragment", [
    ("def build(:\n    pass\n", "bad_pipe.py, line 1: SyntaxError: invalid syntax"),
    ("import numpy\nx = 1\nraise RuntimeError('boom at import')\n", "bad_pipe.py, line 3: RuntimeError: boom at import"),
    ("import numpy\nimport no_such_module_here\n", "bad_pipe.py, line 2: ModuleNotFoundError: No module named 'no_such_module_here'"),
    ("import sys\nsys.exit('no')\n", "bad_pipe.py, line 2: SystemExit: no"),
])
def test_a_pipeline_file_that_fails_at_import_is_a_one_line_error_naming_file_line_and_exception(tmp_path, capsys, body, fragment):
    script = tmp_path / "bad_pipe.py"
    script.write_text(body)
    for command in ("profile", "apply"):
        extra = ["--strategy", "m1-npy-none-s1-w0p-none"] if command == "apply" else []
        code = main(["pipeline", command, f"{script}:build", *extra, "--output-dir", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and fragment in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
    import sys

    assert "bad_pipe" not in sys.modules  # no half-run module left behind


def test_a_strategy_id_with_zero_shards_is_a_one_line_error(capsys):
    with pytest.raises(TrainwiseError, match="has s0: a materialised strategy needs at least one shard"):
        Strategy.parse("m3-npy-none-s0-w0p-app")
    assert main(["pipeline", "apply", "cv", "--strategy", "m3-npy-none-s0-w0p-app"]) == 2
    err = capsys.readouterr().err
    assert "at least one shard" in err and "Traceback" not in err and "ValidationError" not in err


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_a_negative_min_seconds_is_a_one_line_error_before_anything_is_profiled(tmp_path, capsys, value):
    # Before: accepted, and every strategy was profiled with it.
    code = main(["pipeline", "profile", "cv", "--size", "tiny", "--min-seconds", value,
                 "--output-dir", str(tmp_path / "o"), "--data-dir", str(tmp_path / "d")])
    assert code == 2
    assert "--min-seconds must be 0 or more" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "d").exists()
