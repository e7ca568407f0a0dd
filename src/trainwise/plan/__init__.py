"""Planning: where to train, at what time and cost (`trainwise plan`).

    from trainwise.plan import plan, Objective, Constraints, PlanOptions
    result = plan([profile], load_catalog(), Objective(kind="cheapest"), Constraints(allow_spot=False))
    result.ranked, result.pareto, result.flags, result.not_predicted

Modules, one job each: `costs` (billing, provisioning, staging, egress, storage, spot expectation),
`metrics` ($/1M samples, cost efficiency, break-even speedup, speedup with transfer, methodology-2
tables), `objectives` (objective and constraint models), `runtime` (pluggable runtime sources),
`pareto`, `planner` (the pure `plan()`), `command` (the I/O around it for the CLI).
"""

from trainwise.plan.objectives import Constraints, Objective
from trainwise.plan.planner import InfeasiblePlanError, PlanOptions, PlanResult, plan

__all__ = ["Constraints", "InfeasiblePlanError", "Objective", "PlanOptions", "PlanResult", "plan"]
