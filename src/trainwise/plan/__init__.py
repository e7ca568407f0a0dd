"""Planning: where to train, at what time and cost (`trainwise plan`).

    from trainwise.plan import plan, Objective, Constraints, PlanOptions
    result = plan([profile], load_catalog(), Objective(kind="cheapest"), Constraints(allow_spot=False))
    result.ranked, result.pareto, result.flags, result.not_predicted

Modules, one job each: `costs` (billing, provisioning, staging, egress, storage, spot expectation),
`metrics` ($/1M samples, cost efficiency, break-even speedup, speedup with transfer, methodology-2
tables), `objectives` (objective and constraint models), `runtime` (pluggable runtime sources),
`pareto`, `planner` (the pure `plan()`), and what it is built from: `models` (options, result),
`inputs` (profiles, this machine, filter names, predictions), `candidates` (the candidate frame and
its cost model), `feasibility` (constraints), `ranking` (rank, Pareto set, reference metrics) and
`caveats` (flags, assumptions); `command` (the I/O around it for the CLI).
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported on first use: `trainwise.plan.request` and `trainwise.plan.bounds` are read by the CLI
# before any work starts, and the planner pulls in pandas and numpy (about a second).
_LAZY = {"Constraints": "objectives", "Objective": "objectives", "InfeasiblePlanError": "models",
         "PlanOptions": "models", "PlanResult": "models", "plan": "planner"}

__all__ = ["Constraints", "InfeasiblePlanError", "Objective", "PlanOptions", "PlanResult", "plan"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"trainwise.plan.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
