"""A library warning raised through the agent's wrappers names the script's line, as in a plain run."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from trainwise.agent import warning_origin

ROOT = Path(__file__).resolve().parents[1]


def _compiled(source: str, filename: str) -> dict:
    namespace: dict = {"warnings": warnings}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def test_a_warning_that_names_a_trainwise_wrapper_names_its_caller_instead(tmp_path):
    package_dir = str(tmp_path / "trainwise") + os.sep
    library = _compiled("def init():\n    warnings.warn('pinned memory unused', UserWarning, stacklevel=2)\n",
                        str(tmp_path / "site-packages" / "lib.py"))
    # the agent's wrapper, and an interceptor it calls through: two trainwise frames between the script and torch
    wrapper = _compiled("def interceptor(proceed):\n    return proceed()\n"
                        "def wrapped():\n    return interceptor(init)\n", package_dir + "agent/torch_patch.py")
    wrapper["init"] = library["init"]
    uninstall = warning_origin.install(package_dir)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            wrapper["wrapped"]()
            library["init"]()  # called from here directly: unchanged
    finally:
        uninstall()
    assert [Path(w.filename).name for w in caught] == [Path(__file__).name] * 2
    assert caught[0].lineno != caught[1].lineno  # each names its own line of this test


def test_trainwise_own_warnings_and_plain_ones_keep_their_location(tmp_path):
    package_dir = str(tmp_path / "trainwise") + os.sep
    ours = _compiled("def warn_here():\n    warnings.warn('from trainwise', UserWarning, stacklevel=1)\n",
                     package_dir + "profile/notes.py")
    uninstall = warning_origin.install(package_dir)
    try:
        assert warning_origin.install(package_dir)() is None  # installed once; the second is a no-op
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ours["warn_here"]()
            warnings.warn("plain", UserWarning)
    finally:
        uninstall()
    assert caught[0].filename == package_dir + "profile/notes.py"
    assert Path(caught[1].filename).name == Path(__file__).name
    assert not getattr(warnings.warn, "_trainwise_origin", False)  # put back


@pytest.mark.slow
@pytest.mark.long
def test_a_dataloader_warning_under_the_profiler_names_torch_not_trainwise(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, pin_memory=True)\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(2):\n"
        "    for x, y in loader:\n"
        "        opt.zero_grad(); torch.nn.functional.mse_loss(model(x), y).backward(); opt.step()\n")
    out = subprocess.run([str(Path(sys.executable).with_name("trainwise")), "profile", "-o", str(tmp_path / "p.json"), "--",
                          sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() + out.stdout.splitlines() if "pin_memory" in line]
    if not lines:  # this torch sees an accelerator, or no longer warns: nothing to check
        return
    assert all("trainwise" not in line for line in lines), lines
    assert any("dataloader.py" in line for line in lines), lines
