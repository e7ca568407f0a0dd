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
    assert 'id="plans-csv" href="plans.csv.gz"' in dom  # every plan: the table file, not an 8,000-row page
    for table in ("plans-table", "pareto-table", "epochs-table", "breakdown-table", "profiles-table"):
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


@pytest.fixture(scope="module")
def imagenet_report(tmp_path_factory):
    """A catalog-wide plan of a real job (ResNet-50, ImageNet, batch 256, 90 epochs): thousands of
    plans, DDP and Hivemind groups — the page must still open on its answer."""
    from trainwise.predict.characterise import characterise_named

    out = tmp_path_factory.mktemp("imagenet-report")
    profile = synthetic_profile(batch_size=256, batches_per_epoch=5005, host="gpubox", iteration_s=2.0,
                                workload="resnet50-imagenet")
    profile = profile.model_copy(update={"characterisation": characterise_named("resnet50", per_device_batch=256)})
    result = plan([profile], load_catalog(), Objective(kind="cheapest"), epoch_options=[90],
                  options=PlanOptions(dataset_gb=150.0))
    write_report(result, out)
    return out, result


def test_first_screen_holds_the_answer_and_the_chart_and_the_page_is_short(imagenet_report, tmp_path):
    from PIL import Image

    out, result = imagenet_report
    page = (out / "plan.html").resolve().as_uri()
    code, dom, err = _chromium(tmp_path, "--window-size=1400,900", "--virtual-time-budget=5000", "--dump-dom", page)
    assert code == 0, err[-2000:]
    layout = {name: int(re.search(rf'data-{name}="(\d+)"', dom).group(1))
              for name in ("page-height", "answer-bottom", "chart-bottom")}
    assert layout["page-height"] < 6000, layout
    assert layout["answer-bottom"] <= 900 and layout["chart-bottom"] <= 900, layout  # both on the first screen
    best = result.primary.iloc[0]
    first_screen = dom.split('id="first-screen"', 1)[1].split('id="plans-table"', 1)[0]
    assert str(best["offering_id"]) in first_screen and "provisioning" in first_screen and "training" in first_screen
    assert 'id="choices-table"' in first_screen and "<a " in dom and 'href="plans.csv.gz"' in dom
    # provenance in view: the plan tables carry footnote codes, the same code for the same source everywhere
    top = dom.split('id="plans-table"', 1)[1].split("</table>", 1)[0]
    assert top.count("<tr") == 51  # header + the top 50
    assert re.search(r">T\d+ P\d+<", top)

    shot = tmp_path / "first.png"
    code, _, err = _chromium(tmp_path, "--window-size=1400,900", f"--screenshot={shot}", page)
    assert code == 0 and shot.is_file(), err[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 900)
    colours = {colour for _, colour in image.getcolors(maxcolors=1 << 20)}
    assert (0xF3, 0xF9, 0xEE) in colours  # the answer's box
    near_red = [c for c in colours if abs(c[0] - 0xD6) < 12 and abs(c[1] - 0x27) < 20 and abs(c[2] - 0x28) < 20]
    assert near_red  # the chart's Pareto front
