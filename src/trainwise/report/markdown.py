"""The plan as Markdown: the top plans, the Pareto set, flags and assumptions (for READMEs, issues, PRs)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from trainwise.report.data import display_row, records

_HEADERS = ["rank", "offering", "accelerator", "market", "batch", "time", "time band", "cost", "cost band", "$/epoch",
            "$/1M samples", "speedup", "cost eff.", "time from", "price from"]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame, headers: list[str] | None = None) -> str:
    headers = headers or _HEADERS
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for record in records(frame):
        shown = display_row(record)
        lines.append("| " + " | ".join(_cell(shown[h]) for h in headers) + " |")
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
    if result.flags:
        out += ["## Flags", "", *[f"- {flag}" for flag in result.flags], ""]
    if len(result.not_predicted):
        out += [f"Not predicted: {int(result.not_predicted['offerings'].sum())} offerings (no measured profile there and no device-model prediction; "
                "see plan.json).", ""]
    out += ["## Assumptions", "", *[f"- {a}" for a in result.assumptions], ""]
    if result.inconsistencies:
        out += ["## Known inconsistencies in the seed sources (flagged, not reproduced)", "",
                *[f"- {i}" for i in result.inconsistencies], ""]
    return "\n".join(out)
