"""Write a plan's report files: HTML (self-contained), the chart as PNG, JSON and Markdown."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainwise._io import atomic_write_text
from trainwise.report.charts import pareto_chart_png
from trainwise.report.data import plan_payload
from trainwise.report.html import render_html
from trainwise.report.markdown import render_markdown

REPORT_FILES = {"html": "plan.html", "png": "pareto.png", "json": "plan.json", "markdown": "plan.md"}


def _atomic_write_bytes(path: Path, data: bytes) -> Path:
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_report(result: Any, out_dir: str | Path, *, top_n: int = 10, chart_png: bytes | None = None) -> dict[str, Path]:
    """Render and write every report file into `out_dir`; returns {kind: path}."""
    out = Path(out_dir)
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    png = chart_png if chart_png is not None else pareto_chart_png(result)
    paths = {
        "png": _atomic_write_bytes(out / REPORT_FILES["png"], png),
        "html": atomic_write_text(out / REPORT_FILES["html"], render_html(result, png, generated_at=generated, top_n=top_n)),
        "json": atomic_write_text(out / REPORT_FILES["json"],
                                  json.dumps({"generated_at": generated, **plan_payload(result, top_n)}, indent=1)),
        "markdown": atomic_write_text(out / REPORT_FILES["markdown"], render_markdown(result, top_n=top_n, generated_at=generated)),
    }
    return paths
