"""`trainwise launch PLAN` without --dry-run: hand the validated task to SkyPilot's Python API.

On-demand plans: `sky.launch` (cluster torn down when the job ends: `down=True`). Spot plans:
`sky.jobs.launch`, a managed job that SkyPilot relaunches after a preemption (`job_recovery` in the
task). Before launching, the enabled clouds are checked (`sky.enabled_clouds`), and anything missing
is explained in one line. trainwise's runtime estimate is attached to the task
(`Task.set_time_estimator`); note that SkyPilot 0.14 sends tasks to its API server as YAML, where a
Python callable does not travel, so the estimate is used by optimizers run in this process
(`sky.Optimizer.optimize`) — the plan itself already fixed the resources.
"""

from __future__ import annotations

from typing import Any

from trainwise.errors import TrainwiseError
from trainwise.launch.plan_document import PlanDocument
from trainwise.launch.skypilot_task import skypilot_installed, time_estimator, validate_with_skypilot

SKY_NAMES = {"aws": "AWS", "gcp": "GCP", "azure": "Azure", "lambda": "Lambda"}


def missing_for_launch(plan: PlanDocument) -> str | None:
    """One line saying what is missing to launch `plan` on its cloud, or None when nothing is."""
    if not skypilot_installed():
        return ("SkyPilot is not installed: pip install 'skypilot[" + plan.offering.cloud + "]==0.14.1', then "
                f"`sky check {plan.offering.cloud}`; or write the task only with --dry-run")
    import sky

    try:
        enabled = sky.get(sky.enabled_clouds())
    except Exception as exc:
        return f"SkyPilot could not list the enabled clouds ({' '.join(str(exc).split())[:160]}): run `sky check`"
    names = {str(cloud).lower() for cloud in enabled}
    if plan.offering.cloud.lower() not in names:
        have = ", ".join(sorted(names)) or "none"
        return (f"cloud {SKY_NAMES.get(plan.offering.cloud, plan.offering.cloud)} is not enabled in SkyPilot (enabled: "
                f"{have}): set up its credentials and run `sky check {plan.offering.cloud}`")
    return None


def launch_with_skypilot(plan: PlanDocument, config: dict[str, Any]) -> str:
    """Launch; returns a one-line description of what was started."""
    missing = missing_for_launch(plan)
    if missing is not None:
        raise TrainwiseError(missing)
    import sky

    task = validate_with_skypilot(config)
    task.set_time_estimator(time_estimator(plan))
    try:
        if plan.offering.spot:
            request = sky.jobs.launch(task, name=plan.name)
            job_ids, _ = sky.stream_and_get(request)
            return f"managed spot job {plan.name} launched (job id {job_ids}); follow it with `sky jobs logs`"
        request = sky.launch(task, cluster_name=plan.name, down=True)
        job_id, _ = sky.stream_and_get(request)
        return f"cluster {plan.name} launched, job {job_id}; it is torn down when the job ends (`sky status`)"
    except Exception as exc:
        raise TrainwiseError(f"SkyPilot could not launch {plan.name}: {' '.join(str(exc).split())[:300]}") from None
