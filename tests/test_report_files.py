"""Report files without a browser: self-contained HTML with every section, escaped user text,
Markdown and JSON versions of the tables, the PNG chart; the terminal tables keep working."""

from __future__ import annotations

import json
import socket

import pandas as pd
import pytest
from rich.console import Console

from trainwise._io import _umask
from trainwise.catalog import load_catalog, load_user_offerings
from trainwise.plan import Objective, PlanOptions, plan
from trainwise.plan.synthetic import synthetic_profile
from trainwise.report.bundle import REPORT_FILES, write_report
from trainwise.report.charts import add_bundled_fonts, pareto_chart_png
from trainwise.report.html import render_html
from trainwise.report.markdown import render_markdown
from trainwise.report.terminal import print_plan


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    lab = tmp_path_factory.mktemp("lab") / "lab.toml"
    lab.write_text('[[offering]]\nname = "lab-box_1"\nkind = "on_premise"\nprice_per_hour = 0.5\n')
    profiles = [synthetic_profile(host=socket.gethostname(), iteration_s=0.2, jitter=0.05),
                synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02, jitter=0.1)]
    return plan(profiles, load_catalog("packaged"), Objective(kind="weighted"), local_offering=load_user_offerings(lab),
                options=PlanOptions(dataset_gb=1.0))


def test_html_is_self_contained_and_complete(result):
    png = pareto_chart_png(result)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    page = render_html(result, png, generated_at="2026-11-22T00:00:00+00:00")
    assert page.startswith("<!DOCTYPE html>")
    for fragment in ('id="pareto-chart"', 'id="plans-table"', 'id="pareto-table"', 'id="epochs-table"',
                     'id="methodology2-table"', 'id="breakdown-table"', 'id="plans-csv"', 'id="not-predicted-table"',
                     'id="profiles-table"', 'id="assumptions"', 'id="catalog-caption"', "expected preemption loss",
                     "data staging", "first epoch", "steady state", "validation", "prices as of 2026-11-21",
                     "Inconsistencies in the published sources", 'id="best-breakdown"', 'id="sources-legend"'):
        assert fragment in page, fragment
    assert "http://" not in page and "https://" not in page and "<link" not in page and "src=\"http" not in page
    assert "lab-box_1" in page  # names are character-checked when read (trainwise.userfiles), Jinja2 escapes the rest


def test_markdown_and_json(result, tmp_path):
    paths = write_report(result, tmp_path / "r")
    assert {p.name for p in paths.values()} == set(REPORT_FILES.values())
    payload = json.loads(paths["json"].read_text())
    assert payload["objective"]["kind"] == "weighted" and payload["best"]["score"] is not None
    assert payload["not_predicted"] and all(r["status"].startswith("not predicted") for r in payload["not_predicted"])
    assert "plans" not in payload and payload["plans_total"] == len(result.ranked)
    plans = pd.read_csv(paths["plans"])
    assert list(plans["plan_id"]) == list(result.ranked["plan_id"])
    for key in ("time_provenance", "price_provenance", "init_s", "first_epoch_s", "steady_s", "validation_s",
                "staging_s", "preemption_loss_s"):
        assert plans[key].notna().all(), key
    assert write_report(result, tmp_path / "again")["plans"].read_bytes() == paths["plans"].read_bytes()
    assert {oct(p.stat().st_mode & 0o777) for p in paths.values()} == {oct(0o666 & ~_umask())}
    markdown = render_markdown(result)
    assert markdown.count("| rank | offering |") == 2 and "| epochs |" in markdown
    assert "## Time breakdown" in markdown and "| plan | provisioning |" in markdown
    assert "## Not predicted" in markdown and "| cloud | accelerator | count |" in markdown
    assert "\\<b>" not in markdown and "<b\\>" not in markdown
    assert paths["markdown"].read_text().startswith("# trainwise plan")


def test_a_rendering_error_writes_no_report_file(result, tmp_path, monkeypatch):
    from trainwise.report import bundle

    def broken_markdown(*args, **kwargs):
        raise ValueError("rendering failed")

    monkeypatch.setattr(bundle, "render_markdown", broken_markdown)
    with pytest.raises(ValueError, match="rendering failed"):
        write_report(result, tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("width", [100, 240])
def test_terminal_tables(result, width):
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    print_plan(console, result)
    text = console.export_text()
    assert "Top" in text and "Pareto set" in text and "Best plan per epoch option" in text
    assert "measured on gpubox (imported)" in text.replace("\n", " ") or "T2" in text


def test_cost_efficiency_reads_in_one_unit():
    from trainwise.report.data import accelerators_text, cost_efficiency_text

    # 1 − C/C_ref shown as the cost ratio C/C_ref for every row: never "66.7 %" beside "4,311.0×"
    assert cost_efficiency_text(0.5) == "0.50×"
    assert cost_efficiency_text(-0.6) == "1.60×"
    assert cost_efficiency_text(-2496.523) == "2,498×"
    assert cost_efficiency_text(float("nan")) == "—"
    assert accelerators_text({"accelerator": "A10", "accelerator_count": 1 / 3}) == "A10 ×1/3"  # not ×0.333333
    assert accelerators_text({"accelerator": "A100", "accelerator_count": 8.0}) == "A100 ×8"
    assert accelerators_text({"accelerator": None, "accelerator_count": 0.0}) == "CPU"


def test_footnote_codes_mean_the_same_source_in_every_table(result):
    """--all on a narrow terminal: T1/P1 stand for the same time/price source in the top-plans table
    and in the Pareto table (they used to be renumbered per table)."""
    import re

    console = Console(width=100, record=True, file=open("/dev/null", "w"))
    print_plan(console, result)
    text = console.export_text()
    legends = re.findall(r"([TP]\d+): (.+?)(?:;|\n)", text)
    meaning: dict[str, str] = {}
    for code, source in legends:
        assert meaning.setdefault(code, source.strip()) == source.strip(), code
    assert len(meaning) >= 2


def test_html_footnote_codes_are_stable(result):
    import re

    page = render_html(result, pareto_chart_png(result))
    legend = page.split('id="sources-legend"', 1)[1].split("</ul>", 1)[0]
    codes = re.findall(r"<b>([TP]\d+)</b>", legend)
    assert len(codes) == len(set(codes)) >= 2  # one entry per code, the same code in every table
    for table in ("plans-table", "pareto-table"):
        body = page.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
        assert set(re.findall(r">(T\d+) P\d+<", body)) <= set(codes)


def test_chart_restores_bundled_fonts_a_stale_font_cache_hides(result, monkeypatch, caplog):
    """A font list cached by a matplotlib without its bundled fonts (same cache format) made every chart's
    log-axis ticks print a findfont warning per font family; the chart now adds the bundled fonts back."""
    import logging
    from pathlib import Path

    import matplotlib
    from matplotlib import font_manager
    from matplotlib.figure import Figure

    manager = font_manager.fontManager
    bundled = (Path(matplotlib.get_data_path()) / "fonts" / "ttf").resolve()
    stale = [entry for entry in manager.ttflist if Path(entry.fname).resolve().parent != bundled]
    monkeypatch.setattr(manager, "ttflist", stale)
    manager._findfont_cached.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="matplotlib.font_manager"):
            assert pareto_chart_png(result)[:8] == b"\x89PNG\r\n\x1a\n"
            figure = Figure()
            figure.text(0.5, 0.5, r"$\mathdefault{10^{2}}$ and $x_1$")
            figure.savefig(__import__("io").BytesIO(), format="png")
        assert not [r for r in caplog.records if "findfont" in r.getMessage()]
        assert {Path(e.fname).name for e in manager.ttflist} >= {"STIXGeneral.ttf", "cmr10.ttf"}
        assert add_bundled_fonts() == 0  # once back, nothing is added twice
    finally:
        monkeypatch.undo()
        manager._findfont_cached.cache_clear()
