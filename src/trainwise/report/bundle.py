"""Write a plan's report files: HTML (self-contained), the chart as PNG, JSON, Markdown, and every ranked
plan as a compressed CSV table."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainwise._io import atomic_write_bytes
from trainwise.report.charts import pareto_chart_png
from trainwise.report.data import plan_payload, plans_table
from trainwise.report.html import render_html
from trainwise.report.markdown import render_markdown

REPORT_FILES = {"html": "plan.html", "png": "pareto.png", "json": "plan.json", "markdown": "plan.md",
                "plans": "plans.csv.gz"}


def write_report(result: Any, out_dir: str | Path, *, top_n: int = 10, chart_png: bytes | None = None) -> dict[str, Path]:
    """Render and write every report file into `out_dir`; returns {kind: path}. Everything is rendered
    before the first file is written: a rendering error leaves no half-written report."""
    out = Path(out_dir)
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    png = chart_png if chart_png is not None else pareto_chart_png(result)
    payload = {"generated_at": generated, **plan_payload(result, top_n), "plans_file": REPORT_FILES["plans"]}
    contents = {
        "png": png,
        "html": render_html(result, png, generated_at=generated, top_n=top_n).encode("utf-8"),
        "json": json.dumps(payload, indent=1).encode("utf-8"),
        "markdown": render_markdown(result, top_n=top_n, generated_at=generated).encode("utf-8"),
        # Every ranked plan as a table (tens of thousands of rows for a catalog-wide plan: ~50 MB as
        # JSON records, a few MB as compressed CSV); pandas.read_csv reads it back.
        "plans": _csv_gz(plans_table(result)),
    }
    return {kind: atomic_write_bytes(out / REPORT_FILES[kind], data) for kind, data in contents.items()}


def _csv_gz(frame) -> bytes:
    buffer = io.BytesIO()
    # mtime 0: the same plan gives the same bytes
    frame.to_csv(buffer, index=False, compression={"method": "gzip", "mtime": 0})
    return buffer.getvalue()
