"""A self-contained HTML report of a plan: inline CSS, the chart embedded as a base64 PNG, no
script or style from anywhere else — it opens offline. One small inline script writes the decoded
chart size into the page (a check that the image rendered; harmless without JavaScript)."""

from __future__ import annotations

import base64
import html
from typing import Any

import pandas as pd

from trainwise.predict.malta import normalise_by_minimum
from trainwise.report.data import BREAKDOWN, display_row, duration, money, records

MAX_OFFERING_ROWS = 400

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem auto;max-width:1400px;color:#222;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
.caption{color:#555;font-size:.9rem}.best{background:#f3f9ee;border:1px solid #b9d9a5;padding:.7rem 1rem;border-radius:6px}
.flags{background:#fff8e1;border:1px solid #f0d58a;padding:.5rem 1rem;border-radius:6px}
table{border-collapse:collapse;font-size:.8rem;margin:.5rem 0;width:100%}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:right;vertical-align:top;white-space:nowrap}
th{background:#f4f4f4;position:sticky;top:0}td.l,th.l{text-align:left;white-space:normal}
tr.pareto td{background:#fff2f2}tr.best td{background:#f3f9ee;font-weight:600}
figure{margin:0}figure img{max-width:100%;height:auto;border:1px solid #eee}
.bar{display:flex;height:12px;min-width:200px}.bar span{display:block;height:12px}
.muted{color:#777}.scroll{overflow-x:auto;max-width:100%}code{background:#f4f4f4;padding:0 3px}
"""
_BAR_COLOURS = ["#9e9e9e", "#8d6e63", "#ffb74d", "#64b5f6", "#1976d2", "#81c784", "#e57373"]


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(headers: list[str], rows: list[list[str]], *, table_id: str | None = None, left: set[str] | None = None,
           row_classes: list[str] | None = None, raw: bool = False) -> str:
    left = left or set()
    out = [f'<div class="scroll"><table{f" id={chr(34)}{table_id}{chr(34)}" if table_id else ""}><thead><tr>']
    out += [f'<th class="{"l" if h in left else ""}">{_e(h)}</th>' for h in headers]
    out.append("</tr></thead><tbody>")
    for i, row in enumerate(rows):
        cls = row_classes[i] if row_classes else ""
        out.append(f'<tr class="{cls}">')
        for h, cell in zip(headers, row):
            out.append(f'<td class="{"l" if h in left else ""}">{cell if raw else _e(cell)}</td>')
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


_PLAN_HEADERS = ["rank", "offering", "accelerator", "market", "batch", "time", "time band", "cost", "cost band", "$/h",
                 "$/epoch", "$/1M samples", "speedup", "cost eff.", "break-even", "time from", "price from"]
_LEFT = {"offering", "accelerator", "market", "time from", "price from", "item", "where", "quantity", "profile",
         "host", "device", "cloud", "status", "plan", "value"}


def _plan_rows(frame: pd.DataFrame, best_id: str | None) -> tuple[list[list[str]], list[str]]:
    rows, classes = [], []
    for record in records(frame):
        shown = display_row(record)
        rows.append([shown[h] for h in _PLAN_HEADERS])
        classes.append("best" if record["plan_id"] == best_id else ("pareto" if record.get("pareto") else ""))
    return rows, classes


def _breakdown_table(frame: pd.DataFrame) -> str:
    headers = ["plan", *[label for _, label in BREAKDOWN], "total", "share"]
    rows = []
    for record in records(frame):
        parts = [max(0.0, record.get(column) or 0.0) for column, _ in BREAKDOWN]
        total = record["wall_s"] or 0.0
        whole = sum(parts) or 1.0
        bar = "".join(f'<span title="{_e(label)}: {_e(duration(v))}" style="width:{100 * v / whole:.2f}%;'
                      f'background:{_BAR_COLOURS[i]}"></span>' for i, ((_, label), v) in enumerate(zip(BREAKDOWN, parts)))
        rows.append([_e(f"{record['offering_id']} ({record['market']}, batch {record['batch_size']})"),
                     *[_e(duration(v)) for v in parts], _e(duration(total)), f'<div class="bar">{bar}</div>'])
    legend = " ".join(f'<span style="color:{_BAR_COLOURS[i]}">■</span> {_e(label)}' for i, (_, label) in enumerate(BREAKDOWN))
    return _table(headers, rows, table_id="breakdown-table", left={"plan"}, raw=True) + f'<p class="caption">{legend}. ' \
        "steady state = the remaining iterations and the between-epoch work; the expected preemption loss (spot only) " \
        "is checkpoint writes + lost work + restarts (Young/Daly).</p>"


def _methodology2(result: Any, keys: pd.DataFrame) -> str:
    """Malta's methodology-2 view: time and cost of the leading candidates for every
    epoch option, each column divided by its minimum."""
    plans = result.plans[result.plans["feasible"]]
    ident = ["offering_id", "market", "batch_size"]
    chosen = keys[ident].drop_duplicates()
    merged = plans.merge(chosen, on=ident, how="inner")
    if merged.empty:
        return ""
    labels = (merged["offering_id"].astype(str) + " (" + merged["market"].astype(str) + ", b" + merged["batch_size"].astype(str)
              + ")")
    merged = merged.assign(label=labels)
    headers = ["plan"] + [f"time ×min, {e} ep" for e in result.epoch_options] + [f"cost ×min, {e} ep" for e in result.epoch_options]
    table: dict[str, dict[str, str]] = {label: {} for label in dict.fromkeys(merged["label"])}
    for e in result.epoch_options:
        column = merged[merged["epochs"] == e]
        if column.empty:
            continue
        times = normalise_by_minimum({r.label: r.wall_s for r in column.itertuples()})
        costs_ = normalise_by_minimum({r.label: max(r.total_cost, 1e-12) for r in column.itertuples()})
        for label in table:
            table[label][f"time ×min, {e} ep"] = f"{times[label]:.2f}" if label in times else "—"
            table[label][f"cost ×min, {e} ep"] = f"{costs_[label]:.2f}" if label in costs_ else "—"
    rows = [[label, *[cells.get(h, "—") for h in headers[1:]]] for label, cells in table.items()]
    return ("<h2>Normalised time and cost per epoch option (Malta's methodology 2)</h2>"
            '<p class="caption">Each column divided by its smallest value among these plans: 1.00 is the best; '
            "a plan whose 1.00 moves between columns is the flip the flags warn about.</p>"
            + _table(headers, rows, table_id="methodology2-table", left={"plan"}))


def render_html(result: Any, chart_png: bytes, *, generated_at: str = "", top_n: int = 10) -> str:
    """The report page. `chart_png` is embedded inline (base64)."""
    primary = result.primary
    best = records(primary.head(1))[0]
    chart = base64.b64encode(chart_png).decode("ascii")
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>trainwise plan — {_e(best['offering_id'])}</title><style>{_CSS}</style></head><body>",
             "<h1>trainwise plan</h1>",
             f'<p class="caption" id="catalog-caption">{_e(result.catalog_caption)}'
             + (f" · generated {_e(generated_at)}" if generated_at else "") + "</p>",
             f"<p>Objective: <b>{_e(result.objective.describe)}</b> · epoch options {_e(', '.join(map(str, result.epoch_options)))} "
             f"(headline: {result.primary_epochs} epochs) · reference for speedup/cost efficiency: "
             f"<code>{_e(result.reference or 'none')}</code> (speedup compares training time only, as the seed "
             "defines it; the time column also counts provisioning and data staging)</p>"]
    shown = display_row(best)
    parts.append(f'<div class="best" id="best-plan"><b>Best plan ({result.primary_epochs} epochs):</b> '
                 f"{_e(best['offering_id'])} — {_e(shown['accelerator'])}, {_e(best['market'])}, batch {best['batch_size']}: "
                 f"<b>{_e(shown['time'])}</b> ({_e(shown['time band'])}) for <b>{_e(shown['cost'])}</b> ({_e(shown['cost band'])}); "
                 f"{_e(shown['$/1M samples'])} per 1M samples. Time: {_e(best['time_provenance'])}; price: "
                 f"{_e(best['price_provenance'])}.</div>")
    if result.flags:
        parts.append('<h2>Robustness flags</h2><div class="flags" id="flags"><ul>'
                     + "".join(f"<li>{_e(flag)}</li>" for flag in result.flags) + "</ul></div>")
    parts.append("<h2>Pareto chart: cost vs time</h2><figure>"
                 f'<img id="pareto-chart" alt="Pareto chart of expected cost against expected wall time" '
                 f'src="data:image/png;base64,{chart}">'
                 f'<figcaption class="caption">Every feasible plan at {result.primary_epochs} epochs; the red step line '
                 "is the Pareto front (no plan is both faster and cheaper), bars are the uncertainty bands, the star is "
                 'the best plan for the objective. <span id="chart-status" hidden>chart not yet decoded</span></figcaption></figure>')
    top = primary.head(top_n)
    rows, classes = _plan_rows(top, best["plan_id"])
    parts.append(f"<h2>Top {len(top)} plans ({result.primary_epochs} epochs)</h2>"
                 + _table(_PLAN_HEADERS, rows, table_id="plans-table", left=_LEFT, row_classes=classes))
    pareto = result.pareto[result.pareto["epochs"] == result.primary_epochs]
    rows, classes = _plan_rows(pareto, best["plan_id"])
    parts.append(f"<h2>Pareto set ({len(pareto)} plans, {result.primary_epochs} epochs)</h2>"
                 + _table(_PLAN_HEADERS, rows, table_id="pareto-table", left=_LEFT, row_classes=classes))
    per_epochs = result.best_per_epochs()
    rows, classes = _plan_rows(per_epochs.assign(rank=per_epochs["epochs"]), None)
    headers = ["epochs" if h == "rank" else h for h in _PLAN_HEADERS]
    parts.append("<h2>Best plan per epoch option</h2>" + _table(headers, rows, table_id="epochs-table", left=_LEFT))
    parts.append(_methodology2(result, top))
    parts.append("<h2>Time breakdown</h2>" + _breakdown_table(top))
    shown_rows = primary.head(MAX_OFFERING_ROWS)
    rows, classes = _plan_rows(shown_rows, best["plan_id"])
    more = (f' <span class="muted">(first {MAX_OFFERING_ROWS} of {len(primary)}; every plan in plans.csv.gz)</span>'
            if len(primary) > MAX_OFFERING_ROWS else "")
    parts.append(f"<h2>Every feasible plan ({len(primary)}, {result.primary_epochs} epochs){more}</h2>"
                 + _table(_PLAN_HEADERS, rows, table_id="offerings-table", left=_LEFT, row_classes=classes))
    excluded = {k: v for k, v in result.exclusions.items() if v}
    if excluded:
        parts.append("<h2>Excluded by constraints</h2>" + _table(
            ["constraint", "candidates excluded"], [[k, str(v)] for k, v in excluded.items()], table_id="excluded-table",
            left={"constraint"}))
    if len(result.not_predicted):
        np_rows = [[r["cloud"], str(r["accelerator"]), f"{r['accelerator_count']:g}" if r["accelerator_count"] is not None else "—",
                    str(r["offerings"]), money(r["min_price_per_hour"]), money(r["min_spot_price_per_hour"]), str(r["catalog"]),
                    r["status"]] for r in records(result.not_predicted, list(result.not_predicted.columns))]
        parts.append(f"<h2>Not predicted ({int(result.not_predicted['offerings'].sum())} offerings)</h2>"
                     '<p class="caption">Priced, but no runtime: no profile was measured on these accelerators and the device '
                     "model could not predict them (the model does not fit in the accelerator's memory, the accelerator is "
                     "unknown to the model, or devices × the batch per device exceed the training set). Profile the job on one of them and pass <code>--profile</code>.</p>"
                     + _table(["cloud", "accelerator", "count", "offerings", "from $/h", "spot from $/h", "catalog", "status"],
                              np_rows, table_id="not-predicted-table", left={"cloud", "accelerator", "catalog", "status"}))
    prof_rows = [[p["label"], p["host"], str(p["device"]), str(p.get("accelerator") or "—"), str(p["batch_size"]),
                  p["provenance"], str(p.get("created_at") or "")] for p in result.profiles]
    parts.append("<h2>Profiles (provenance of every time)</h2>" + _table(
        ["profile", "host", "device", "accelerator", "batch", "provenance", "measured at"], prof_rows, table_id="profiles-table",
        left={"profile", "host", "device", "accelerator", "provenance", "measured at"}))
    parts.append('<h2>Assumptions</h2><ul id="assumptions">' + "".join(f"<li>{_e(a)}</li>" for a in result.assumptions)
                 + "</ul>")
    parts.append("<h2>Provenance legend</h2><ul>"
                 "<li><b>measured here</b>: a profile taken on this host; <b>measured on HOST (imported)</b>: a profile "
                 "taken elsewhere on the same accelerator and passed with --profile; <b>modelled ±x %</b>: the device "
                 "model (a roofline of the profile's traced operations on the offering's accelerator, fitted to measured "
                 "throughputs; ±x % is its expected error) or the data-parallel model on top of it (all-reduce, "
                 "Hivemind averaging), each row saying which.</li><li>Prices: <b>catalog … snapshot</b> (packaged or imported catalog, its "
                 "date), <b>seed-2021</b> (the seed documents' prices), <b>user file</b>, <b>assumed</b>.</li></ul>")
    if result.inconsistencies:
        parts.append("<h2>Known inconsistencies in the seed sources (flagged, not reproduced)</h2><ul>"
                     + "".join(f"<li>{_e(i)}</li>" for i in result.inconsistencies) + "</ul>")
    parts.append("<script>(function(){var i=document.getElementById('pareto-chart'),s=document.getElementById('chart-status');"
                 "function done(){s.textContent=i.naturalWidth>0?('chart decoded '+i.naturalWidth+'x'+i.naturalHeight):"
                 "'chart failed to decode';s.setAttribute('data-natural-width',String(i.naturalWidth));}"
                 "if(i.complete){done();}else{i.addEventListener('load',done);i.addEventListener('error',done);}})();</script>")
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)
