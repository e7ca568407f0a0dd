"""The plan as Markdown: the top plans, the Pareto set, the time breakdown, flags, what was not predicted and
the assumptions (for READMEs, issues, PRs)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from trainwise.report.data import BREAKDOWN, display_row, duration, money, records

_HEADERS = ["rank", "offering", "accelerator", "market", "batch", "time", "time band", "cost", "cost band", "$/epoch",
            "$/1M samples", "speedup", "cost vs ref.", "time from", "price from"]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame, headers: list[str] | None = None) -> str:
    headers = headers or _HEADERS
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for record in records(frame):
        shown = display_row(record)
        lines.append("| " + " | ".join(_cell(shown[h]) for h in headers) + " |")
    return "\n".join(lines)


def _breakdown(frame: pd.DataFrame) -> str:
    headers = ["plan", *[label for _, label in BREAKDOWN], "total"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for record in records(frame):
        parts = [duration(max(0.0, record.get(column) or 0.0)) for column, _ in BREAKDOWN]
        plan = f"{record['offering_id']} ({record['market']}, batch {record['batch_size']})"
        lines.append("| " + " | ".join(_cell(c) for c in (plan, *parts, duration(record["wall_s"]))) + " |")
    return "\n".join(lines)


def _not_predicted(frame: pd.DataFrame) -> str:
    headers = ["cloud", "accelerator", "count", "offerings", "from $/h", "spot from $/h", "status"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in records(frame, list(frame.columns)):
        count = f"{r['accelerator_count']:g}" if r.get("accelerator_count") is not None else "—"
        cells = (r["cloud"], r["accelerator"], count, r["offerings"], money(r["min_price_per_hour"]),
                 money(r["min_spot_price_per_hour"]), r["status"])
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def render_markdown(result: Any, *, top_n: int = 10, generated_at: str = "") -> str:
    best = records(result.primary.head(1))[0]
    shown = display_row(best)
    out = [
        "# trainwise plan",
        "",
        f"_{result.catalog_caption}_" + (f" · generated {generated_at}" if generated_at else ""),
        "",
        f"Objective: **{result.objective.describe}** · epoch options {', '.join(map(str, result.epoch_options))} "
        f"(headline {result.primary_epochs}) · reference `{result.reference or 'none'}` (speedup: training time only; "
        "time also counts provisioning and staging)",
        "",
        f"**Best plan ({result.primary_epochs} epochs):** {best['offering_id']} ({shown['accelerator']}, {best['market']}, "
        f"batch {best['batch_size']}): {shown['time']} ({shown['time band']}) for {shown['cost']} ({shown['cost band']}). "
        f"Time: {best['time_provenance']}; price: {best['price_provenance']}.",
        "",
        f"## Top plans ({result.primary_epochs} epochs)",
        "",
        markdown_table(result.primary.head(top_n)),
        "",
        "## Pareto set",
        "",
        markdown_table(result.pareto[result.pareto["epochs"] == result.primary_epochs]),
        "",
        "## Best plan per epoch option",
        "",
        markdown_table(result.best_per_epochs().assign(rank=lambda f: f["epochs"]),
                       ["rank", "offering", "market", "batch", "time", "cost", "time from"]).replace("| rank |", "| epochs |", 1),
        "",
    ]
    out += ["## Time breakdown", "", _breakdown(result.primary.head(top_n)), ""]
    if result.flags:
        out += ["## Flags", "", *[f"- {flag}" for flag in result.flags], ""]
    if len(result.not_predicted):
        out += [f"## Not predicted ({int(result.not_predicted['offerings'].sum())} offerings)", "",
                "Priced, but no runtime: no profile was measured on these accelerators and the device model could not "
                "predict them. Profile the job on one of them and pass `--profile`.", "",
                _not_predicted(result.not_predicted), ""]
    out += ["## Assumptions", "", *[f"- {a}" for a in result.assumptions], ""]
    if result.inconsistencies:
        out += ["## Known inconsistencies in the published sources (flagged, not reproduced)", "",
                *[f"- {i}" for i in result.inconsistencies], ""]
    return "\n".join(out)
