"""Loaded at interpreter start-up when `trainwise run` puts this folder first on PYTHONPATH.

In a process that trains (the only process of the local engine, each torchrun worker, each Hivemind
peer) it arms the profiler's recorder in full mode — the same zero-code-change instrumentation as
`trainwise profile --full` — writing to a per-rank file, then trainwise's run agent (checkpointing,
DDP communication timing, the Hivemind optimizer wrap). torchrun's own agent process, which only
starts the workers, is left alone. Then it hands over to any other `sitecustomize`.
"""

import os as _os
import sys as _sys


def _chain_next_sitecustomize() -> None:
    import importlib.machinery as machinery
    import importlib.util as util

    here = _os.path.dirname(_os.path.abspath(__file__))
    others = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _arm() -> None:
    import json

    config = json.loads(_os.environ["TRAINWISE_RUN_CONFIG"])
    if config.get("distributed") and "LOCAL_RANK" not in _os.environ:
        return  # torchrun's agent: it starts the workers, it does not train
    _os.environ.pop("TRAINWISE_RUN_CONFIG", None)  # subprocesses of the training process do not arm
    try:
        from trainwise.run import _child
    except ImportError:
        _sys.path.append(_os.environ.get("TRAINWISE_PACKAGE_PARENT", ""))
        from trainwise.run import _child
    _child.arm(config)
    # Keras / Lightning / Hugging Face Trainer loops: their fit entry point gets trainwise's callback when
    # the script imports it; the callback then reports the loop through the integration sink.
    from trainwise.integrations import _autodetect

    _autodetect.watch_framework_imports()


if _os.environ.get("TRAINWISE_RUN_CONFIG"):
    try:
        _arm()
    except Exception as exc:  # never break the user's program because instrumentation failed to arm
        print(f"trainwise: run instrumentation not armed in this process ({exc})", file=_sys.stderr)

_chain_next_sitecustomize()
