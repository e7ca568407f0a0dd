"""Loaded by the interpreter at start-up when `trainwise profile` puts this folder first on PYTHONPATH.

It arms trainwise's recorder (which waits for the script to import torch) and then hands over to any
other `sitecustomize` the environment had, so that the user's interpreter behaves as without us.
"""

import os as _os
import sys as _sys


def _chain_next_sitecustomize() -> None:
    # Only the first `sitecustomize` on sys.path is imported by `site`; ours shadows any other one.
    import importlib.machinery as machinery
    import importlib.util as util

    here = _os.path.dirname(_os.path.abspath(__file__))
    others = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = util.module_from_spec(spec)
    spec.loader.exec_module(module)


if _os.environ.get("TRAINWISE_PROFILE_CONFIG"):
    try:
        try:
            from trainwise.profile import _child
        except ImportError:
            # A different interpreter than trainwise's own: reach the package where it lives.
            _sys.path.append(_os.environ.get("TRAINWISE_PACKAGE_PARENT", ""))
            from trainwise.profile import _child

        _child.arm()
        # Keras / Lightning / Hugging Face Trainer loops: their fit entry point gets trainwise's callback when
        # the script imports it; the callback then reports the loop through the integration sink.
        from trainwise.integrations import _autodetect

        _autodetect.watch_framework_imports()
    except Exception as exc:  # never break the user's program because the profiler failed to arm
        print(f"trainwise: profiler not armed in this process ({exc})", file=_sys.stderr)

_chain_next_sitecustomize()
