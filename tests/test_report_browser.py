"""The HTML report renders in a real browser (headless Chromium): the chart image decodes and the
tables are there. Skipped only when Chromium is not installed (`apt-get install -y chromium`)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess

import pytest

from trainwise.catalog import load_catalog
from trainwise.plan import Objective, PlanOptions, plan
from trainwise.plan.synthetic import synthetic_profile
from trainwise.report.bundle import write_report

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--disable-breakpad", "--disable-crash-reporter"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    profiles = [synthetic_profile(host=socket.gethostname(), iteration_s=0.2, jitter=0.05),
                synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02, jitter=0.1)]
    result = plan(profiles, load_catalog("packaged"), Objective(kind="cheapest"), options=PlanOptions(dataset_gb=2.0))
    write_report(result, out)
    return out


def _chromium(tmp_path, *args: str) -> tuple[int, str, str]:
    """Run Chromium with its output in files, not pipes: helper processes it leaves behind (crash
    handler) would otherwise hold the pipes open and the call would wait for them."""
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        code = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args], stdout=stdout,
                              stderr=stderr, stdin=subprocess.DEVNULL, timeout=180, check=False).returncode
    return code, out.read_text(errors="replace"), err.read_text(errors="replace")


def test_chart_decodes_and_tables_render(report, tmp_path):
    page = (report / "plan.html").resolve().as_uri()
    code, dom, err = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", page)
    assert code == 0, err[-2000:]
    match = re.search(r'id="chart-status"[^>]*data-natural-width="(\d+)"', dom)
    assert match, "the inline check did not run: " + dom[:500]
    assert int(match.group(1)) > 300
    assert "chart decoded" in dom
    assert re.search(r'<img id="pareto-chart"[^>]*src="data:image/png;base64,', dom)
    for table in ("plans-table", "pareto-table", "epochs-table", "breakdown-table", "offerings-table", "profiles-table"):
        body = dom.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
        assert body.count("<tr") >= 2, table  # header + at least one row
    assert "measured on gpubox (imported) on V100" in dom and "measured here" in dom


def test_screenshot_is_not_blank(report, tmp_path):
    from PIL import Image

    shot = tmp_path / "shot.png"
    code, _, err = _chromium(tmp_path, "--window-size=1280,1600", f"--screenshot={shot}", (report / "plan.html").resolve().as_uri())
    assert code == 0 and shot.is_file(), err[-2000:]
    image = Image.open(shot).convert("L")
    assert image.size == (1280, 1600)
    low, high = image.getextrema()
    assert high - low > 100  # text and chart, not an empty page
