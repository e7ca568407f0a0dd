"""What `trainwise pipeline ... SPEC` names: a reference pipeline (cv, nlp, audio, nilm) or `module:function`
/ `path/to/file.py:function` whose function (no arguments) returns a Pipeline (or is one)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from trainwise.errors import TrainwiseError
from trainwise.pipeline.reference import REFERENCE_NAMES, reference_pipeline
from trainwise.pipeline.spec import Pipeline


def load_spec(spec: str, *, data_dir: str | Path = "trainwise-pipeline-data", size: str | int = "small") -> Pipeline:
    if spec in REFERENCE_NAMES:
        return reference_pipeline(spec, data_dir, size)
    if ":" not in spec:
        raise TrainwiseError(f"unknown pipeline {spec!r}: use a reference pipeline ({', '.join(REFERENCE_NAMES)}) or module:function "
                             "returning a trainwise.pipeline.Pipeline")
    target, _, attribute = spec.rpartition(":")
    path = Path(target) if target.endswith(".py") else None
    if path is not None and not path.is_file():
        raise TrainwiseError(f"pipeline file {path} does not exist")
    try:
        if path is not None:
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
            sys.modules[path.stem] = module
            try:
                module_spec.loader.exec_module(module)  # type: ignore[union-attr]
            except BaseException:
                sys.modules.pop(path.stem, None)  # not a half-run module for a later import to find
                raise
        else:
            module = importlib.import_module(target)
    except ImportError as exc:
        if path is None and exc.name is not None and target.startswith(exc.name):
            raise TrainwiseError(f"cannot import {target!r} for pipeline {spec!r}: {exc}; check the module path (run from its "
                                 "directory or install it)") from None
        raise TrainwiseError(f"{_where(exc, path)}: {type(exc).__name__}: {exc} while importing pipeline {spec!r}; "
                             "fix that import") from None
    except SyntaxError as exc:
        raise TrainwiseError(f"{exc.filename or target}, line {exc.lineno}: SyntaxError: {exc.msg} in pipeline {spec!r}; "
                             "fix the file") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module: name where it failed, in one line
        raise TrainwiseError(f"{_where(exc, path)}: {type(exc).__name__}: {exc} while importing pipeline {spec!r}; fix the "
                             "code that runs at import") from None
    if not hasattr(module, attribute):
        raise TrainwiseError(f"{target!r} has no attribute {attribute!r}")
    value: Any = getattr(module, attribute)
    if callable(value) and not isinstance(value, Pipeline):
        try:
            pipeline = value()
        except TrainwiseError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's builder: name it and its error in one line
            raise TrainwiseError(f"{spec}() raised {type(exc).__name__}: {exc}; fix the function that builds the pipeline") from None
    else:
        pipeline = value
    if not isinstance(pipeline, Pipeline):
        raise TrainwiseError(f"{spec} gave a {type(pipeline).__name__}, not a trainwise.pipeline.Pipeline")
    return pipeline


def _where(exc: BaseException, path: Path | None) -> str:
    """`file, line N` of the failure: the deepest line of the pipeline's own file, else the deepest
    line outside importlib (a library the module called)."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    own = [f for f in frames if path is not None and Path(f.filename).resolve() == path.resolve()]
    frame = (own or frames or [None])[-1]
    if frame is None:
        return str(path) if path is not None else "the pipeline module"
    return f"{frame.filename}, line {frame.lineno}"
