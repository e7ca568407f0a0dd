"""The quick subset of benchmarks/bad_input.py: hostile files and options against the commands, each in a
capped subprocess; every one must end in a one-line error (or a clean success), with no traceback, hang,
half-written file, orphan, injection or NaN/Infinity in a JSON output. The whole corpus is a benchmark."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "bad_input.py"


def _load():
    sys.path.insert(0, str(BENCHMARK.parent))
    spec = importlib.util.spec_from_file_location("bad_input_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bad_input = _load()


@pytest.fixture(scope="module")
def fast_cases():
    return {case.id: case for case in bad_input.corpus(fast=True, with_plan=False)}


@pytest.mark.parametrize("case_id", bad_input.FAST)
def test_bad_input_fast_subset(fast_cases, case_id):
    result = bad_input.run_case(fast_cases[case_id])
    assert result["passed"], result


def test_the_corpus_covers_the_issue():
    ids = [case.id for case in bad_input.corpus(with_plan=False)]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 400
    for fragment in ("alias-bomb", "nonutf8", "deep", "big-int", "step-1e308", "interval-low-above-high",
                     "zero-batches-per-epoch", "batch-0", "price-1e308", "zero-tflops", "injection", "aws-without-zone",
                     "stored-truncated", "nonutf8-command", "data-dir", "ddp-nproc-4096", "forged-checkpoint",
                     "hivemind-missing", "helper-processes", "weights-nan", "epochs-1e12", "docstring-example"):
        assert any(fragment in case_id for case_id in ids), fragment
