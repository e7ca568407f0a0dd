"""Rich renderings for the terminal: a profile summary and prediction tables.

Every number says where it comes from: "measured here" (this host's profile), "measured on HOST"
(a profile imported from elsewhere), "transferred" (a GPU profile's measured step scaled by the device model's
ratio to a GPU of the same family), or "modelled" with the model's band.
"""

from __future__ import annotations

import socket
from typing import Sequence

from rich.console import Console
from rich.table import Table

from trainwise.agent import cpu_steal
from trainwise.allocator import describe as describe_allocator
from trainwise.core.profile import slice_note
from trainwise.core.units import format_duration  # noqa: F401 - re-exported
from trainwise.denormals import describe as describe_denormals
from trainwise.predict.same_machine import Prediction, host_stray_fraction, sampled_steps_s
from trainwise.profile.schema import Profile


def provenance_of(profile: Profile) -> str:
    host = profile.environment.hostname
    return "measured here" if host == socket.gethostname() else f"measured on {host} (imported)"


def profile_table(profile: Profile) -> Table:
    s = profile.steady_state
    d = profile.dataset
    table = Table(title=f"Profile ({profile.mode}, {provenance_of(profile)})", show_header=True)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("spread / note")
    table.add_row("T(Init)", format_duration(profile.init.total_s),
                  f"startup {format_duration(profile.init.python_startup_s)}, import torch "
                  + (format_duration(profile.init.import_torch_s) if profile.init.import_torch_s is not None else "n/a"))
    table.add_row("T(It1) cold start", format_duration(s.first_iteration_s), f"{s.warmup_iterations} warm-up iteration(s) dropped")
    table.add_row("steady iteration (mean)", format_duration(s.iteration.mean_s),
                  f"95% CI {format_duration(s.iteration.ci95_low_s)}–{format_duration(s.iteration.ci95_high_s)}, "
                  f"median {format_duration(s.iteration.median_s)}, n={s.iteration.n}")
    table.add_row("  data wait", format_duration(s.data_wait.mean_s), f"{s.data_wait.mean_s / s.iteration.mean_s:.1%} of the iteration" if s.iteration.mean_s else "")
    table.add_row("  compute", format_duration(s.compute.mean_s), "forward + backward + optimizer")
    # The first timed pass of each DataLoader the script evaluated (the training set, the validation set)
    first_passes: dict = {}
    for v in profile.validations:
        first_passes.setdefault(v.loader, v)
    for n, v in enumerate(first_passes.values()):
        label = "validation (timed)" if len(first_passes) == 1 else f"validation (timed) #{n + 1}"
        table.add_row(label, format_duration(v.wall_s), f"{v.batches_timed} of {v.batches_total or '?'} batches")
    char = profile.characterisation
    if char is not None and char.passes_per_step > 1:
        per_step = (f"{char.passes_per_step} model passes of {char.traced_batch} per optimizer step"
                    if char.per_device_batch > char.traced_batch else
                    f"{char.passes_per_step} passes over one batch per optimizer step (a closure's evaluations)")
    else:
        per_step = f"{d.batches_per_iteration:g} batch(es) per optimizer step"
    table.add_row("samples / iteration", str(d.global_batch_size), per_step)
    table.add_row("iterations / epoch", str(d.iterations_per_epoch or "unknown"), f"N_train={d.n_train}, N_val={d.n_val}")
    if profile.script_epochs is not None:
        table.add_row("epochs (the script's)", str(profile.script_epochs.epochs),
                      f"{profile.script_epochs.source}: predict and plan use it unless given --epochs")
    elif unbound := next((note for note in profile.notes if note.startswith("no epoch count read: ")), None):
        table.add_row("epochs (the script's)", "not read", unbound.removeprefix("no epoch count read: "))
    if profile.script_iterations is not None:
        table.add_row("optimizer steps (the script's)", f"{profile.script_iterations.iterations:,}",
                      f"{profile.script_iterations.source}: predict and plan turn it into epochs of "
                      f"{d.iterations_per_epoch or '?'} iterations")
    table.add_row("parameters", f"{profile.model.parameters:,}", f"gradients {profile.model.gradient_bytes / 1e6:.1f} MB")
    table.add_row("peak RSS", f"{profile.memory.peak_rss_bytes / 2**20:.0f} MiB",
                  "" if profile.memory.peak_device_bytes is None else f"device peak {profile.memory.peak_device_bytes / 2**20:.0f} MiB")
    table.add_row("allocator", describe_allocator(profile.environment.allocator_env),
                  "launch the full run with the same settings (trainwise run does)")
    table.add_row("denormals", describe_denormals(profile.environment.flush_denormal),
                  "CPU step time depends on it; trainwise run applies the same")
    zeros = profile.optimizer_state_zeros
    if zeros is not None and zeros.elements:
        stake = ("" if zeros.step_time_at_stake_s is None else
                 f"sqrt {zeros.sqrt_state_ns_per_element:.2f} ns/element (normal values {zeros.sqrt_normal_ns_per_element:.2f}, "
                 f"zeros {zeros.sqrt_zero_ns_per_element:.2f}): "
                 f"up to {format_duration(zeros.step_time_at_stake_s)} of each step goes away as it fills in")
        table.add_row(f"{zeros.optimizer} {zeros.state} zeros", f"{zeros.zero_fraction:.1%}", stake)
    subnormals = profile.optimizer_state_subnormals
    if subnormals is not None and subnormals.worst_step_added_s is not None:
        counted = "not counted" if subnormals.subnormals is None else f"{subnormals.subnormals:,} of {subnormals.elements:,}"
        table.add_row(f"{subnormals.optimizer} state subnormal", counted,
                      f"a step {subnormals.step_subnormal_ns_per_element:.1f} ns per subnormal value, "
                      f"{subnormals.step_normal_ns_per_element:.1f} per normal one: up to "
                      f"{format_duration(subnormals.worst_step_added_s)} a step if it all turns subnormal")
    if profile.host_noise is not None:
        table.add_row("host speed wander", f"±{host_stray_fraction(profile):.1%}",
                      f"90th percentile over {sampled_steps_s(profile):.1f} s windows, {profile.host_noise.describe(profile.created_at)}")
    else:
        table.add_row("host speed wander", "not measured", "`trainwise host-noise` once on this host puts it in the band")
    if profile.sample_cpu_steal is not None and profile.sample_cpu_steal >= cpu_steal.NOTEWORTHY_STEAL:
        table.add_row("CPU steal", f"{profile.sample_cpu_steal:.1%}", "the hypervisor's share of this VM's CPU during "
                      "the sampled steps (/proc/stat): they ran slower than the host runs when its neighbours are idle")
    compiled = profile.torch_compile
    if compiled is not None:
        cache = (f"; inductor compiled {compiled.fx_cache_misses} from scratch (not in its cache): a later run on this "
                 "machine finds them cached and compiles faster" if compiled.fx_cache_misses else
                 f"; inductor's cache held all {compiled.fx_cache_hits} it needed" if compiled.fx_cache_hits else "")
        table.add_row("torch.compile", "—" if compiled.compile_s is None else format_duration(compiled.compile_s),
                      f"{compiled.graphs} graph(s) captured, compiled inside T(It1) and the first validation pass{cache}")
    stopped = [f"stable after {s.stabilised_after} iterations"] if s.stabilised_after else []
    cut = next((e for e in profile.epochs if e.truncated and e.batches_per_epoch), None)
    if cut is not None:  # the job's own "epoch 1 ... time=" line times only what ran
        stopped.append(f"epoch {cut.index + 1} ended early after {cut.iterations} iterations (a whole one: "
                       f"{cut.batches_per_epoch:,} batches); the job's own printout for it covers only those")
    table.add_row("profiling stopped", s.stop_reason, "; ".join(stopped))
    table.add_row("profiling cost", format_duration(profile.process_wall_s), "launch → exit")
    return table


def prediction_table(rows: Sequence[tuple[str, Profile, Prediction]], title: str = "Predicted full training time") -> Table:
    """rows: (label, profile, prediction). `×min` is Malta's methodology-2 normalisation: each time
    divided by the smallest for the same estimator and epoch count."""
    sources = sorted({provenance_of(profile) for _, profile, _ in rows})
    allocators = sorted({describe_allocator(profile.environment.allocator_env) for _, profile, _ in rows})
    flushed = sorted({describe_denormals(profile.environment.flush_denormal) for _, profile, _ in rows})
    table = Table(title=title, caption="source: modelled from profiles " + "; ".join(sources)
                  + " (trainwise rows: 95% band from the steady-state spread); valid for a launch with "
                  + " / ".join(allocators) + "; denormals " + " / ".join(flushed))
    for column in ("profile", "estimator", "epochs", "predicted", "95% band", "×min"):
        table.add_column(column, justify="left" if column in ("profile", "estimator") else "right")
    minimum: dict[tuple[str, int], float] = {}
    for _, _, p in rows:
        key = (p.estimator, p.epochs)
        minimum[key] = min(minimum.get(key, float("inf")), p.total_s)
    for label, _, p in rows:
        band = "—" if p.low_s == p.high_s else f"{format_duration(p.low_s)}–{format_duration(p.high_s)}"
        table.add_row(label, p.estimator, str(p.epochs), format_duration(p.total_s), band,
                      f"{p.total_s / minimum[(p.estimator, p.epochs)]:.2f}")
    return table


def print_notes(console: Console, rows: Sequence[tuple[str, Profile, Prediction]]) -> None:
    """Each profile's prediction caveats, once per profile and text (they do not change with the epochs)."""
    for label, note in dict.fromkeys((label, p.note) for label, _, p in rows if p.note):
        console.print(f"[yellow]{label}: {note}[/yellow]")


def print_flips(console: Console, rows: Sequence[tuple[str, Profile, Prediction]]) -> None:
    """Malta's observation: the best choice can change with the epoch count — say so."""
    best: dict[int, str] = {}
    for epochs in sorted({p.epochs for _, _, p in rows}):
        candidates = [(p.total_s, label) for label, _, p in rows if p.epochs == epochs and p.estimator == rows[0][2].estimator]
        if candidates:
            best[epochs] = min(candidates)[1]
    if len(set(best.values())) > 1:
        console.print("[yellow]The fastest choice changes with the epoch count: "
                      + ", ".join(f"{e} epochs → {label}" for e, label in best.items()) + "[/yellow]")


# ---- plans (trainwise plan) -------------------------------------------------------------------

_PLAN_COLUMNS = ["rank", "offering", "accelerator", "market", "batch", "time", "time band", "cost", "cost band",
                 "$/1M samples", "speedup", "time from", "price from"]
_COMPACT_COLUMNS = ["rank", "offering", "accelerator", "market", "batch", "time", "cost", "$/1M samples", "sources"]
WIDE_TERMINAL = 180


def plan_table(frame, title: str, caption: str = "", best_id: str | None = None, compact: bool = False,
               notes: dict | None = None) -> Table:
    """A rich table of plan rows (a DataFrame from a PlanResult); the best row bold, Pareto rows red.
    `compact` (narrow terminals): fewer columns, and the provenance of each row's time (T1, T2…)
    and price (P1, P2…) as footnotes in the caption."""
    from trainwise.report.data import display_row, records

    columns = _COMPACT_COLUMNS if compact else _PLAN_COLUMNS
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column, justify="left" if column in ("offering", "accelerator", "market", "time from", "price from", "sources") else "right",
                         overflow="fold")
    # one `notes` shared by the tables of a page keeps each code meaning the same source in all of them
    notes = {} if notes is None else notes
    for record in records(frame):
        shown = display_row(record)
        if compact:
            t = notes.setdefault(("T", shown["time from"]), f"T{sum(1 for k in notes if k[0] == 'T') + 1}")
            p = notes.setdefault(("P", shown["price from"]), f"P{sum(1 for k in notes if k[0] == 'P') + 1}")
            shown["sources"] = f"{t} {p}"
        style = "bold green" if record["plan_id"] == best_id else ("red" if record.get("pareto") else None)
        table.add_row(*[shown[c] for c in columns], style=style)
    legend = "; ".join(f"{code}: {text}" for (_, text), code in notes.items())
    table.caption = "\n".join(part for part in (caption, legend) if part)
    return table


def print_plan(console: Console, result, top_n: int = 10) -> None:
    """Top plans, the Pareto set, the best plan per epoch option, flags and the not-predicted count."""
    primary = result.primary
    best_id = primary.iloc[0]["plan_id"]
    compact = console.width < WIDE_TERMINAL
    caption = result.catalog_caption
    if not compact:
        caption += (f"\nspeedup: training time against {result.reference or 'the reference'} (Künas' definition); "
                    "time also counts provisioning and data staging")
    notes: dict = {}
    console.print(plan_table(primary.head(top_n), f"Top {min(top_n, len(primary))} plans, {result.primary_epochs} epoch{'' if result.primary_epochs == 1 else 's'} — "
                             f"{result.objective.describe}", caption, best_id, compact, notes))
    pareto = result.pareto[result.pareto["epochs"] == result.primary_epochs]
    console.print(plan_table(pareto, f"Pareto set ({len(pareto)}): no other plan is both faster and cheaper",
                             "red: on the Pareto front; bold green: the best plan", best_id, compact, notes))
    per_epochs = result.best_per_epochs()
    table = Table(title="Best plan per epoch option (Malta's methodology 2)")
    for column in ("epochs", "offering", "market", "batch", "time", "cost"):
        table.add_column(column, justify="left" if column in ("offering", "market") else "right")
    from trainwise.report.data import display_row, records

    for record in records(per_epochs):
        shown = display_row(record)
        table.add_row(str(record["epochs"]), shown["offering"], shown["market"], shown["batch"], shown["time"], shown["cost"])
    console.print(table)
    console_distributed_table(console, primary, best_id, top_n)
    for flag in result.flags:
        console.print(f"[yellow]⚠ {flag}[/yellow]", highlight=False)
    if len(result.not_predicted):
        console.print(f"[dim]{int(result.not_predicted['offerings'].sum())} priced offerings are not predicted "
                      "(no measured profile there, and the device model could not predict them: the model does not fit, the accelerator "
                      "is unknown to it, or the offering's devices × the batch per device exceed the training set — see plan.json "
                      "`not_predicted`): profile on their accelerator and pass --profile, or lower the batch[/dim]")


def distributed_table(frame, best_id: str | None = None, top_n: int = 10, compact: bool = False) -> Table | None:
    """The best data-parallel / Hivemind rows with their granularity and why each wins or loses
    against the best single machine; None when the plan has no such rows. `compact` (narrow
    terminals): rank, offering, G, time, cost and why only."""
    from trainwise.report.data import display_row, money, records

    if "parallelism" not in frame.columns:
        return None
    rows = frame[frame["parallelism"].astype("string").fillna("") != ""].head(top_n)  # single machines: ""
    if not len(rows):
        return None
    table = Table(title=f"Best {len(rows)} data-parallel and decentralised groups (modelled)")
    columns = (("rank", "offering", "G", "time", "cost", "why") if compact else
               ("rank", "offering", "parallelism", "workers", "G", "time", "cost", "network $/h", "why"))
    for column in columns:
        table.add_column(column, justify="left" if column in ("offering", "parallelism", "why") else "right",
                         overflow="fold", ratio=3 if column in ("why", "offering") else None)
    for record in records(rows):
        shown = display_row(record)
        granularity = record.get("granularity")
        workers = record.get("workers")
        cells = {"rank": str(int(record["rank"])) if record.get("rank") is not None else "",
                 "offering": shown["offering"], "parallelism": str(record.get("parallelism") or ""),
                 "workers": "" if workers is None else str(int(workers)),
                 "G": "—" if granularity is None else f"{granularity:.2g}", "time": shown["time"], "cost": shown["cost"],
                 "network $/h": money(record.get("network_usd_per_hour")), "why": str(record.get("why") or "")}
        style = "bold green" if record["plan_id"] == best_id else None
        table.add_row(*[cells[c] for c in columns], style=style)
    table.caption = "G = compute time / communication time per round; G < 1: communication-bound"
    return table


def console_distributed_table(console: Console, frame, best_id: str | None, top_n: int = 10) -> None:
    table = distributed_table(frame, best_id, top_n, compact=console.width < WIDE_TERMINAL)
    if table is not None:
        console.print(table)


# ---- the short answer (trainwise plan, default) ------------------------------------------------

ANSWER_ALTERNATIVES = 6


def choice_key(frame):
    """What makes two plans a different choice for the user: the machine (instance type and its
    accelerators), the market and the engine — not the region or zone it runs in."""
    parallelism = (frame["parallelism"].astype(object).fillna("").astype(str) if "parallelism" in frame.columns
                   else frame["offering_id"].astype(str).str[:0])
    engine = parallelism.where(parallelism != "", "single")
    return (frame["cloud"].astype(str) + "|" + frame["instance_type"].astype(str) + "|"
            + frame["accelerator"].astype(object).fillna("CPU").astype(str) + "|"
            + frame["accelerator_count"].astype(str) + "|" + frame["market"].astype(str) + "|" + engine)


def distinct_choices(primary, limit: int | None):
    """The best plan of each distinct choice (`choice_key`), best first, with the number of regions
    (or zones) the same choice was priced in: (rows, regions per row)."""
    keys = choice_key(primary)
    first = ~keys.duplicated()
    regions = primary.assign(_k=keys).groupby("_k", sort=False)["offering_id"].nunique()
    rows = primary[first.to_numpy()]
    if limit is not None:
        rows = rows.head(limit)
    return rows, [int(regions[k]) for k in keys[first.to_numpy()].head(len(rows))]


def engine_of(record: dict) -> str:
    return {"": "single", "ddp-node": "DDP", "ddp-multi-node": "DDP", "hivemind": "Hivemind"}.get(
        str(record.get("parallelism") or ""), str(record.get("parallelism")))


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def short_duration(seconds: float | None) -> str:
    """A duration in at most 8 characters: "45 s", "17.5 min", "31.2 h", "1,344 h"."""
    if seconds is None or seconds != seconds:
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 600:
        return f"{seconds / 60:.1f} min"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    hours = seconds / 3600
    return f"{hours:.1f} h" if hours < 100 else f"{hours:,.0f} h"


def choice_label(record: dict) -> str:
    """The machine a plan rents, with its engine when it is a group: "g5.xlarge", "DDP 4× g4dn.xlarge"."""
    engine = engine_of(record)
    return str(record["instance_type"]) if engine == "single" else f"{engine} {record['instance_type']}"


def headline_flags(result) -> tuple[list[str], int]:
    """The flags about the headline epoch count or the whole plan, and how many others there are."""
    import re

    own = [f for f in result.flags if not re.match(r"\d+ epochs:", f) or f.startswith(f"{result.primary_epochs} epochs:")]
    return own, len(result.flags) - len(own)


def print_answer(console: Console, result, top_n: int = ANSWER_ALTERNATIVES, report_path=None) -> None:
    """The answer in about 30 lines: the best plan and why (its time and cost broken down), the best
    plan of each other distinct choice, what was not ranked and the robustness flags."""
    from rich import box
    from rich.table import Table as RichTable

    from trainwise.report.data import accelerators_text, cost_ratio, display_row, money, records, time_parts

    primary = result.primary
    best = records(primary.head(1))[0]
    shown = display_row(best)
    batch = result.job_global_batch or best["batch_size"]
    console.print(f"[bold]Plan[/bold]: {result.primary_epochs} epochs at global batch {batch:,}, "
                  f"{result.objective.describe}", highlight=False)
    for profile in result.profiles:
        note = slice_note(profile.get("notes", ()))
        console.print(_short(f"  {profile['label']}: {profile['provenance']}" + (f", {note}" if note else ""),
                             2 * console.width - 4), highlight=False, style="dim")
    choices, regions = distinct_choices(primary, top_n + 1)
    where = f"; cheapest of {regions[0]} regions" if regions and regions[0] > 1 else ""
    console.print(f"\n[bold green]Best:[/bold green] {best['offering_id']}", highlight=False)
    engine = "one machine" if engine_of(best) == "single" else engine_of(best)
    console.print(f"  {accelerators_text(best)}, {best['market']}, {engine}{where}", highlight=False)
    console.print(f"  [bold]{short_duration(best['wall_s'])}[/bold] ({short_duration(best['low_s'])}–"
                  f"{short_duration(best['high_s'])}) for [bold]{money(best['total_cost'])}[/bold] "
                  f"({shown['cost band']}), {shown['$/1M samples']}/1M samples", highlight=False)
    console.print("  time: " + ", ".join(f"{label} {short_duration(v)}" for label, v in time_parts(best)),
                  highlight=False)
    fixed = best.get("fixed_cost") or 0.0
    console.print(f"  cost = fixed {money(fixed)} (boot, staging, storage) + training {money(best['total_cost'] - fixed)}",
                  highlight=False)
    console.print(_short(f"  time from: {best['time_provenance']}", console.width), highlight=False, style="dim")
    console.print(_short(f"  price from: {best['price_provenance']}", console.width), highlight=False, style="dim")

    table = RichTable(title="The best plan of each other choice", box=box.SIMPLE_HEAD, title_justify="left",
                      pad_edge=False, show_edge=False, collapse_padding=True, padding=(0, 1))
    # widths that fit 80 columns: only the machine's name gives way (ellipsis), never a number
    widths = {"#": 4, "machine": 22, "accel.": 12, "market": 7, "reg.": 4, "time": 7, "cost": 7, "× best": 6}
    for column, width in widths.items():
        table.add_column(column, justify="left" if column in ("machine", "accel.", "market") else "right",
                         overflow="ellipsis", no_wrap=True, max_width=width,
                         min_width=None if column == "machine" else min(width, len(column)))
    alternatives = records(choices.iloc[1:])
    for record, n_regions in zip(alternatives, regions[1:]):
        table.add_row(str(int(record["rank"])), choice_label(record), accelerators_text(record),
                      "on-dem." if record["market"] == "on-demand" else str(record["market"]), str(n_regions),
                      short_duration(record["wall_s"]), money(record["total_cost"]),
                      cost_ratio(record["total_cost"], best["total_cost"]))
    if alternatives:
        console.print(table)
    console.print(f"{len(primary):,} plans in {len(choice_key(primary).unique()):,} choices; --top N for more, "
                  "--all for every table", highlight=False)
    pruned = {reason: count for reason, count in (result.pruned or {}).items() if count}
    if pruned:
        console.print(f"[yellow]not ranked[/yellow] (would change the global batch {batch:,}): "
                      + "; ".join(f"{count:,} × {reason}" for reason, count in pruned.items()), highlight=False)
    for reason, count in (result.idle or {}).items():
        console.print(f"[yellow]not ranked[/yellow]: {count:,} offerings or groups with accelerators ({reason})",
                      highlight=False)
    flags, others = headline_flags(result)
    for flag in flags[:2]:
        console.print(f"[yellow]⚠[/yellow] {_short(flag, 2 * console.width - 24)}", highlight=False)
    if len(flags) > 2 or others:
        console.print(f"[yellow]⚠[/yellow] {len(flags[2:]) + others} more flag(s) in the report", highlight=False)
