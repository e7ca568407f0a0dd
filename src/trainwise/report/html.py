"""A self-contained HTML report of a plan: inline CSS, the chart embedded as a base64 PNG, no
script or style from anywhere else — it opens offline. One small inline script writes the decoded
chart size into the page (a check that the image rendered; harmless without JavaScript)."""

from __future__ import annotations

import base64
import html
from typing import Any

import pandas as pd

from trainwise.core.profile import slice_note
from trainwise.predict.malta import normalise_by_minimum
from trainwise.report.data import BREAKDOWN, display_row, duration, money, records

TOP_ROWS = 50
PARETO_ROWS = 25
ANSWER_CHOICES = 6

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem auto;max-width:1400px;color:#222;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
.caption{color:#555;font-size:.9rem}.best{background:#f3f9ee;border:1px solid #b9d9a5;padding:.7rem 1rem;border-radius:6px}
.flags{background:#fff8e1;border:1px solid #f0d58a;padding:.5rem 1rem;border-radius:6px}
table{border-collapse:collapse;font-size:.8rem;margin:.5rem 0;width:100%}
th,td{border:1px solid #ddd;padding:2px 5px;text-align:right;vertical-align:top;white-space:nowrap}
th{background:#f4f4f4;position:sticky;top:0}td.l,th.l{text-align:left;white-space:normal}
tr.pareto td{background:#fff2f2}tr.best td{background:#f3f9ee;font-weight:600}
figure{margin:0}figure img{max-width:100%;height:auto;border:1px solid #eee}
.first{display:grid;grid-template-columns:minmax(440px,620px) 1fr;gap:1rem;align-items:start}
.answer p{margin:.25rem 0}.answer table{font-size:.75rem}.big{font-size:1.15rem}
details summary{cursor:pointer;color:#555;font-size:.9rem;margin:.4rem 0}sup{color:#555}
#answer table{font-size:.72rem}#answer th,#answer td{padding:1px 3px}
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


_PLAN_HEADERS = ["rank", "offering", "accelerator", "market", "engine", "time", "time band", "cost", "fixed cost",
                 "cost band", "$/h", "$/1M samples", "speedup", "cost vs ref.", "from"]
_LEFT = {"offering", "accelerator", "market", "time from", "price from", "item", "where", "quantity", "profile",
         "host", "device", "cloud", "status", "plan", "value"}


class Sources:
    """Footnote codes for where times (T1, T2, …) and prices (P1, …) come from, the same code for the
    same source in every table of the page."""

    def __init__(self) -> None:
        self.codes: dict[tuple[str, str], str] = {}

    def code(self, kind: str, text: str) -> str:
        key = (kind, text)
        if key not in self.codes:
            self.codes[key] = f"{kind}{sum(1 for k in self.codes if k[0] == kind) + 1}"
        return self.codes[key]

    def legend(self) -> str:
        items = "".join(f"<li><b>{_e(code)}</b> {_e(text)}</li>" for (_, text), code in sorted(
            self.codes.items(), key=lambda kv: (kv[1][0], int(kv[1][1:]))))
        return f'<ul class="caption" id="sources-legend">{items}</ul>'


def _plan_rows(frame: pd.DataFrame, best_id: str | None, sources: "Sources | None" = None
               ) -> tuple[list[list[str]], list[str]]:
    from trainwise.report.data import money as _money
    from trainwise.report.terminal import engine_of

    sources = sources or Sources()
    rows, classes = [], []
    for record in records(frame):
        shown = display_row(record)
        shown["engine"] = engine_of(record)
        shown["fixed cost"] = _money(record.get("fixed_cost"))
        shown["from"] = (f"{sources.code('T', shown['time from'])} {sources.code('P', shown['price from'])}")
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


def _answer(result: Any, best: dict[str, Any], sources: "Sources") -> str:
    """The first screen's left column: the best plan, its time and cost broken down, the runner-up of
    each other distinct choice, what was not ranked and the flags."""
    from trainwise.report.data import accelerators_text, cost_ratio, time_parts
    from trainwise.report.terminal import choice_label, distinct_choices, engine_of, short_duration

    shown = display_row(best)
    choices, regions = distinct_choices(result.primary, ANSWER_CHOICES + 1)
    where = f", cheapest of {regions[0]} regions/zones" if regions and regions[0] > 1 else ""
    parts = time_parts(best)
    whole = sum(v for _, v in parts) or 1.0
    bar = "".join(f'<span title="{_e(label)}: {_e(duration(v))}" style="width:{100 * v / whole:.2f}%;'
                  f'background:{_BAR_COLOURS[i * 2 % len(_BAR_COLOURS)]}"></span>' for i, (label, v) in enumerate(parts))
    legend = " · ".join(f'<span style="color:{_BAR_COLOURS[i * 2 % len(_BAR_COLOURS)]}">■</span> {_e(label)} '
                        f"{_e(duration(v))}" for i, (label, v) in enumerate(parts))
    fixed = best.get("fixed_cost") or 0.0
    batch = result.job_global_batch or best["batch_size"]
    out = [f'<div id="answer"><div class="best answer" id="best-plan"><p class="big"><b>Best plan:</b> {_e(best["offering_id"])}</p>',
           f"<p>{_e(accelerators_text(best))}, {_e(best['market'])}, {_e('one machine' if engine_of(best) == 'single' else engine_of(best))}{_e(where)} · "
           f"{result.primary_epochs} epochs at global batch {batch:,}</p>",
           f'<p class="big"><b>{_e(shown["time"])}</b> ({_e(shown["time band"])}) for <b>{_e(shown["cost"])}</b> '
           f"({_e(shown['cost band'])})</p>",
           f'<div class="bar" id="best-breakdown" style="width:100%">{bar}</div><p class="caption">{legend}</p>',
           f"<p>cost = fixed {_e(money(fixed))} (boot, staging, storage) + training {_e(money(best['total_cost'] - fixed))}; "
           f"{_e(shown['$/1M samples'])} per 1M samples</p>",
           f'<p class="caption">time: {_e(best["time_provenance"])} <sup>{sources.code("T", str(best["time_provenance"]))}</sup>; '
           f'price: {_e(best["price_provenance"])} <sup>{sources.code("P", str(best["price_provenance"]))}</sup>; '
           f'boot: {_e(best.get("provisioning_source") or "")}</p></div>']
    rows = []
    for record, n in zip(records(choices.iloc[1:]), regions[1:]):
        rows.append([str(int(record["rank"])), choice_label(record), accelerators_text(record), str(record["market"]),
                     str(n), short_duration(record["wall_s"]), money(record["total_cost"]),
                     cost_ratio(record["total_cost"], best["total_cost"])])
    if rows:
        out.append('<p style="margin:.6rem 0 0"><b>The best plan of each other choice</b></p>' + _table(
            ["rank", "machine", "accelerators", "market", "regions", "time", "cost", "× best"], rows,
            table_id="choices-table", left={"machine", "accelerators", "market"}))
    pruned = {k: v for k, v in (result.pruned or {}).items() if v}
    if pruned:
        out.append(f'<p id="pruned"><b>Not ranked</b> (they would not train the job at global batch {batch:,}): '
                   + "; ".join(f"{v:,} × {_e(k)}" for k, v in pruned.items()) + "</p>")
    for reason, count in (result.idle or {}).items():
        out.append(f'<p id="idle"><b>Not ranked</b>: {count:,} offerings or groups with accelerators ({_e(reason)})</p>')
    if result.flags:
        from trainwise.report.terminal import headline_flags

        own, _ = headline_flags(result)
        others = [flag for flag in result.flags if flag not in own]
        out.append('<div class="flags" id="flags"><ul>' + "".join(f"<li>{_e(flag)}</li>" for flag in own) + "</ul>"
                   + (f"<details><summary>{len(others)} flag(s) about the other epoch options</summary><ul>"
                      + "".join(f"<li>{_e(flag)}</li>" for flag in others) + "</ul></details>" if others else "")
                   + "</div>")
    out.append("</div>")
    return "".join(out)


def render_html(result: Any, chart_png: bytes, *, generated_at: str = "", top_n: int = 10,
                plans_file: str = "plans.csv.gz") -> str:
    """The report page. `chart_png` is embedded inline (base64). The first screen holds the answer and
    the chart; below, the top plans, the Pareto set, and the rest; every plan is in `plans_file`."""
    primary = result.primary
    best = records(primary.head(1))[0]
    sources = Sources()
    chart = base64.b64encode(chart_png).decode("ascii")
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>trainwise plan — {_e(best['offering_id'])}</title><style>{_CSS}</style></head><body>",
             f"<h1>trainwise plan: {_e(result.objective.describe)}</h1>",
             f'<p class="caption" id="catalog-caption">{_e(result.catalog_caption)}'
             + (f" · generated {_e(generated_at)}" if generated_at else "") + "</p>",
             '<div class="first" id="first-screen">', _answer(result, best, sources),
             '<figure><img id="pareto-chart" alt="Pareto chart of expected cost against expected wall time" '
             f'src="data:image/png;base64,{chart}">'
             f'<figcaption class="caption">Every ranked plan at {result.primary_epochs} epochs; faded: dominated; '
             "red step line: the Pareto front; star and diamonds: the best plan of each top choice, by rank. "
             '<span id="chart-status" hidden>chart not yet decoded</span></figcaption></figure></div>']
    top = primary.head(TOP_ROWS)
    rows, classes = _plan_rows(top, best["plan_id"], sources)
    parts.append(f"<h2>Top {len(top)} of {len(primary):,} plans ({result.primary_epochs} epochs)</h2>"
                 f'<p class="caption">Every plan (all epoch options): <a id="plans-csv" href="{_e(plans_file)}">{_e(plans_file)}</a>'
                 f" ({len(result.ranked):,} rows). <b>from</b>: where the time (T) and price (P) come from, listed below "
                 f"the tables; speedup and cost vs ref. against <code>{_e(result.reference or 'none')}</code>.</p>"
                 + _table(_PLAN_HEADERS, rows, table_id="plans-table", left=_LEFT, row_classes=classes))
    pareto = result.pareto[result.pareto["epochs"] == result.primary_epochs]
    rows, classes = _plan_rows(pareto.head(PARETO_ROWS), best["plan_id"], sources)
    parts.append(f"<h2>Pareto set ({len(pareto)} plans{', first ' + str(PARETO_ROWS) if len(pareto) > PARETO_ROWS else ''})</h2>"
                 + _table(_PLAN_HEADERS, rows, table_id="pareto-table", left=_LEFT, row_classes=classes))
    per_epochs = result.best_per_epochs()
    rows, classes = _plan_rows(per_epochs.assign(rank=per_epochs["epochs"]), None, sources)
    headers = ["epochs" if h == "rank" else h for h in _PLAN_HEADERS]
    parts.append("<h2>Best plan per epoch option</h2>" + _table(headers, rows, table_id="epochs-table", left=_LEFT))
    parts.append("<h2>Where the numbers come from</h2>" + sources.legend())
    parts.append("<details><summary>Time breakdown of the top 10 plans</summary>" + _breakdown_table(primary.head(10))
                 + "</details>")
    parts.append("<details><summary>Normalised time and cost per epoch option</summary>"
                 + _methodology2(result, primary.head(10)) + "</details>")
    excluded = {k: v for k, v in result.exclusions.items() if v}
    if excluded:
        parts.append("<h2>Excluded by constraints</h2>" + _table(
            ["constraint", "candidates excluded"], [[k, str(v)] for k, v in excluded.items()], table_id="excluded-table",
            left={"constraint"}))
    if len(result.not_predicted):
        np_rows = [[r["cloud"], str(r["accelerator"]), f"{r['accelerator_count']:g}" if r["accelerator_count"] is not None else "—",
                    str(r["offerings"]), money(r["min_price_per_hour"]), money(r["min_spot_price_per_hour"]), str(r["catalog"]),
                    r["status"]] for r in records(result.not_predicted, list(result.not_predicted.columns))]
        parts.append(f"<details><summary>Not predicted ({int(result.not_predicted['offerings'].sum())} offerings)</summary>"
                     '<p class="caption">Priced, but no runtime: no profile was measured on these accelerators and the device '
                     "model could not predict them (the model does not fit in the accelerator's memory, the accelerator is "
                     "unknown to the model, or the global batch exceeds the training set). Profile the job on one of them and pass <code>--profile</code>.</p>"
                     + _table(["cloud", "accelerator", "count", "offerings", "from $/h", "spot from $/h", "catalog", "status"],
                              np_rows, table_id="not-predicted-table", left={"cloud", "accelerator", "catalog", "status"})
                     + "</details>")
    prof_rows = [[p["label"], p["host"], str(p["device"]), str(p.get("accelerator") or "—"), str(p["batch_size"]),
                  p["provenance"] + (f"; {note}" if (note := slice_note(p.get("notes", ()))) else ""),
                  str(p.get("created_at") or "")] for p in result.profiles]
    parts.append("<h2>Profiles</h2>" + _table(
        ["profile", "host", "device", "accelerator", "batch", "provenance", "measured at"], prof_rows, table_id="profiles-table",
        left={"profile", "host", "device", "accelerator", "provenance", "measured at"}))
    parts.append('<details><summary>Assumptions of the cost model</summary><ul id="assumptions">'
                 + "".join(f"<li>{_e(a)}</li>" for a in result.assumptions) + "</ul></details>")
    parts.append('<p class="caption"><b>measured here</b>: a profile taken on this host; <b>measured on HOST (imported)</b>: '
                 "a profile taken elsewhere on the same accelerator; <b>modelled ±x %</b>: the device model (a roofline of "
                 "the profile's traced operations on the offering's accelerator, fitted to measured throughputs) or the "
                 "data-parallel model on top of it; <b>transferred</b>: a profile taken on a GPU of the same family (H100 and H200, "
                 "A100 40 and 80 GB), its measured step scaled by the device model's ratio between the two GPUs.</p>")
    if result.inconsistencies:
        parts.append("<details><summary>Inconsistencies in the published sources (flagged, not reproduced)</summary><ul>"
                     + "".join(f"<li>{_e(i)}</li>" for i in result.inconsistencies) + "</ul></details>")
    parts.append("<script>(function(){var i=document.getElementById('pareto-chart'),s=document.getElementById('chart-status');"
                 "function done(){s.textContent=i.naturalWidth>0?('chart decoded '+i.naturalWidth+'x'+i.naturalHeight):"
                 "'chart failed to decode';s.setAttribute('data-natural-width',String(i.naturalWidth));}"
                 "if(i.complete){done();}else{i.addEventListener('load',done);i.addEventListener('error',done);}"
                 # the layout as rendered, for the browser test: page height, where the answer and chart end
                 "function layout(){var b=document.body,r=function(id){return String(Math.round("
                 "document.getElementById(id).getBoundingClientRect().bottom));};"
                 "b.setAttribute('data-page-height',String(document.documentElement.scrollHeight));"
                 "b.setAttribute('data-answer-bottom',r('best-plan'));b.setAttribute('data-chart-bottom',r('pareto-chart'));}"
                 "if(i.complete){layout();}else{i.addEventListener('load',layout);}})();</script>")
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)
