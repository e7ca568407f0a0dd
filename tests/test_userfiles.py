"""The one user-file reader and JSON writer (trainwise.userfiles) and the atomic writer's one-line errors."""

from __future__ import annotations

import json
import os
import socket

import pytest

from trainwise import userfiles
from trainwise._io import atomic_write_text
from trainwise.errors import TrainwiseError, WriteError
from trainwise.plan.synthetic import synthetic_profile
from trainwise.profile.schema import load_profile
from trainwise.userfiles import UserFileError


def test_json_bounds_name_the_file_and_the_problem():
    with pytest.raises(UserFileError, match=r"f.json: nested deeper than 64 levels"):
        userfiles.parse_json("[" * 100_000 + "]" * 100_000, "f.json")  # RecursionError before
    with pytest.raises(UserFileError, match=r"the integer 999999999999…999999 \(5000 digits\) is over the 20-digit limit"):
        userfiles.parse_json('{"n": ' + "9" * 5000 + "}", "f.json")  # ValueError (4,300 digits) before
    with pytest.raises(UserFileError, match=r"1e400 is too large to be a finite float"):
        userfiles.parse_json('{"x": 1e400}', "f.json")
    with pytest.raises(UserFileError, match=r"NaN is not a number JSON allows"):
        userfiles.parse_json('{"x": NaN}', "f.json")
    assert userfiles.parse_json('{"a": ["[{", 1]}', "f.json") == {"a": ["[{", 1]}  # brackets in strings do not count


def test_toml_and_yaml_bounds():
    with pytest.raises(UserFileError, match="over the 20-digit limit"):
        userfiles.parse_toml("n = " + "9" * 5000, "f.toml")
    with pytest.raises(UserFileError, match="nested deeper than 64 levels"):
        userfiles.parse_toml("n = " + "[" * 5000 + "]" * 5000, "f.toml")
    with pytest.raises(UserFileError, match=r"f.yaml \(line 1\): the integer .* over the 20-digit limit"):
        userfiles.parse_yaml("n: " + "9" * 5000, "f.yaml")
    with pytest.raises(UserFileError, match="nested deeper than 64 levels"):
        userfiles.parse_yaml("[" * 5000 + "]" * 5000, "f.yaml")
    with pytest.raises(UserFileError, match="not valid YAML"):
        userfiles.parse_yaml("a: !!python/object/apply:os.system ['true']", "f.yaml")


def test_non_utf8_names_the_byte_offset_and_line():
    with pytest.raises(UserFileError, match=r"f.csv: not UTF-8 text \(byte 0xff at byte offset 6, line 2\)"):
        userfiles.decode_utf8(b"a,b\n1,\xff\n", "f.csv")
    assert userfiles.decode_utf8(b"\xef\xbb\xbfa,b", "f.csv") == "a,b"  # a BOM is dropped


def test_files_that_are_not_regular_files_are_refused_before_opening(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # opening it would block until a writer comes
    with pytest.raises(UserFileError, match="is not a regular file"):
        userfiles.load_json(fifo, "profile")
    with pytest.raises(UserFileError, match="is not a regular file"):
        userfiles.load_json("/dev/zero", "profile")
    with pytest.raises(UserFileError, match="is a folder"):
        userfiles.load_json(tmp_path, "profile")
    sparse = tmp_path / "big.json"
    with open(sparse, "wb") as handle:
        handle.truncate(2 * 1024**3)
    with pytest.raises(UserFileError, match=r"big.json is 2048 MiB, over the 64 MiB limit"):
        userfiles.load_json(sparse, "profile")


def test_json_text_refuses_non_finite_values_and_keeps_non_utf8_bytes():
    with pytest.raises(TrainwiseError, match=r"not writing the plan: `rows.1.cost` is not a finite number"):
        userfiles.json_text({"rows": [{"cost": 1.0}, {"cost": float("inf")}]}, "the plan")
    typed = os.fsdecode(b"/x_\xff")  # what Python makes of a non-UTF-8 byte on the command line
    text = userfiles.json_text({"command": ["python", typed]}, "x")
    assert "\\udcff" in text and text.isascii()
    assert os.fsencode(json.loads(text)["command"][1]) == b"/x_\xff"  # lossless


def test_a_profile_with_a_non_utf8_command_is_saved_and_reads_back(tmp_path):
    profile = synthetic_profile(host=socket.gethostname(), iteration_s=0.2, jitter=0.05)
    profile = profile.model_copy(update={"command": ["python", "train.py", "--done-file", os.fsdecode(b"/x_\xff")]})
    with pytest.raises(Exception, match="surrogates not allowed"):
        profile.model_dump_json()  # what `trainwise profile` wrote with, after the training had run
    path = profile.save(tmp_path / "p.json")
    assert os.fsencode(load_profile(path).command[-1]) == b"/x_\xff"


@pytest.mark.parametrize("change, fragment", [
    (lambda d: d["steady_state"]["iteration"].update(mean_s=1e308), "steady_state.iteration.mean_s`: mean_s is over 1e+09 s"),
    (lambda d: d["dataset"].update(train_batches_per_epoch=0), "dataset.train_batches_per_epoch`: an epoch has at least 1 batch"),
    (lambda d: d["dataset"].update(global_batch_size=0), "dataset.global_batch_size`: a batch has at least 1 sample"),
    (lambda d: d["steady_state"]["iteration"].update(ci95_low_s=9.0, ci95_high_s=1.0), "an interval's low end exceeds its high end"),
])
def test_implausible_profiles_are_refused_naming_the_field(tmp_path, change, fragment):
    data = json.loads(synthetic_profile(host="h", iteration_s=0.2, jitter=0.05).to_json())
    change(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TrainwiseError, match="re-run `trainwise profile`") as excinfo:
        load_profile(path)
    assert fragment in str(excinfo.value)


def test_big_integers_in_a_profile_are_one_line(tmp_path):
    text = synthetic_profile(host="h", iteration_s=0.2, jitter=0.05).to_json()
    path = tmp_path / "p.json"
    path.write_text(text.replace('"global_batch_size": ', '"global_batch_size": 1' + "0" * 400 + ', "_x": ', 1))
    with pytest.raises(TrainwiseError, match="over the 20-digit limit"):  # OverflowError before
        load_profile(path)


def test_the_atomic_writer_turns_os_errors_into_one_line_write_errors(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("x")
    with pytest.raises(WriteError, match=r"cannot write .*file/out.json \(.*\): choose a writable location") as excinfo:
        atomic_write_text(blocked / "out.json", "{}")
    assert isinstance(excinfo.value, OSError) and isinstance(excinfo.value, TrainwiseError)
    with pytest.raises(WriteError, match=r"cannot write /dev/full \(No space left on device\): free some space"):
        atomic_write_text("/dev/full", "{}")
    assert not list(tmp_path.glob("*.tmp"))


def test_safe_names():
    assert userfiles.check_safe_name("p3.2xlarge", "instance type") == "p3.2xlarge"
    for bad in ("p3.2xlarge;$(touch x)", "a b", "x\ny", "`id`", "", "-rf"):
        with pytest.raises(UserFileError, match="has characters"):
            userfiles.check_safe_name(bad, "instance type")
