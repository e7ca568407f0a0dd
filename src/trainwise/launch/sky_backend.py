"""`trainwise launch PLAN` without --dry-run: hand the validated task to SkyPilot's Python API.

On-demand plans: `sky.launch` (cluster torn down when the job ends: `down=True`). Spot plans:
`sky.jobs.launch`, a managed job that SkyPilot relaunches after a preemption (`job_recovery` in the
task). Before anything is written, the plan's cloud is checked against the clouds SkyPilot can use
(`enabled_clouds` below), and anything missing is explained in one line.

SkyPilot 0.14 is a client of an API server: every SDK call (`sky.client.sdk.*`, re-exported as
`sky.launch`, `sky.get`, …) returns a request id, and `sky.get` / `sky.stream_and_get` wait for its
result. There is no top-level `sky.enabled_clouds` in 0.14. Like the `sky` CLI, the SDK starts a
local API server on first use when no remote one is configured. trainwise's runtime estimate is attached to the task
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


def _api_error(exc: Exception) -> str:
    """One line for a failed API-server request: what went wrong and the fix."""
    from sky import exceptions as sky_exceptions

    detail = " ".join(str(exc).split())[:200] or exc.__class__.__name__
    if isinstance(exc, sky_exceptions.ApiServerConnectionError):
        return (f"no SkyPilot API server answers ({detail}): start a local one with `sky api start`, or connect to "
                "yours with `sky api login -e URL`")
    if isinstance(exc, sky_exceptions.ApiServerAuthenticationError):
        return f"the SkyPilot API server needs a login ({detail}): run `sky api login`"
    if "SKYPILOT_DISABLE_LOCAL_API_SERVER" in detail:
        return ("no SkyPilot API server is configured and starting a local one is disabled "
                "(SKYPILOT_DISABLE_LOCAL_API_SERVER=1): connect to one with `sky api login -e URL`, or unset the variable")
    return f"SkyPilot could not list the enabled clouds ({detail}): run `sky check`"


def enabled_clouds() -> set[str]:
    """Lower-case names of the clouds SkyPilot has working credentials for, from its API server."""
    import sky
    from sky.client import sdk

    try:
        return {str(cloud).lower() for cloud in sky.get(sdk.enabled_clouds())}
    except Exception as exc:  # connection, authentication, server start-up or request errors
        raise TrainwiseError(_api_error(exc)) from None


def missing_for_launch(plan: PlanDocument) -> str | None:
    """One line saying what is missing to launch `plan` on its cloud, or None when nothing is."""
    if not skypilot_installed():
        return ("SkyPilot is not installed: pip install 'skypilot[" + plan.offering.cloud + "]==0.14.1', then "
                f"`sky check {plan.offering.cloud}`; or write the task only with --dry-run")
    try:
        names = enabled_clouds()
    except TrainwiseError as exc:
        return str(exc)
    if plan.offering.cloud.lower() not in names:
        have = ", ".join(sorted(names)) or "none"
        return (f"cloud {SKY_NAMES.get(plan.offering.cloud, plan.offering.cloud)} is not enabled in SkyPilot (enabled: "
                f"{have}): set up its credentials and run `sky check {plan.offering.cloud}`")
    return None


def checkpoint_secrets(plan: PlanDocument) -> dict[str, str]:
    """The checkpoint key as a SkyPilot secret, for a plan that checkpoints: every node, and the
    cluster a spot recovery starts, must verify the checkpoints this key signed. A secret, never an
    env or a file mount: SkyPilot redacts it from logs and YAML, and it never sits in the bucket."""
    if not plan.checkpoint_uri:
        return {}
    from trainwise.run.checkpoint_key import KEY_ENV, key_text, load_key

    return {KEY_ENV: key_text(load_key())}


def sky_task(plan: PlanDocument, config: dict[str, Any]) -> Any:
    """The validated `sky.Task` that `launch_with_skypilot` hands to SkyPilot: the task YAML's config,
    trainwise's time estimate, and the checkpoint key as a secret (added here, after the YAML was
    written, so no file on disk holds it)."""
    task = validate_with_skypilot(config)
    task.set_time_estimator(time_estimator(plan))
    secrets = checkpoint_secrets(plan)
    if secrets:
        task.update_secrets(secrets)
    return task


def launch_with_skypilot(plan: PlanDocument, config: dict[str, Any], keep_cluster: bool = False) -> str:
    """Launch; returns a one-line description of what was started. Call `missing_for_launch` first
    (`trainwise launch` does, before it writes anything). `keep_cluster`: an on-demand cluster stays
    up when the job ends (the user copies the results off and tears it down)."""
    import sky

    task = sky_task(plan, config)
    try:
        if plan.offering.spot:
            request = sky.jobs.launch(task, name=plan.name)
            job_ids, _ = sky.stream_and_get(request)
            return f"managed spot job {plan.name} launched (job id {job_ids}); follow it with `sky jobs logs`"
        request = sky.launch(task, cluster_name=plan.name, down=not keep_cluster)
        job_id, _ = sky.stream_and_get(request)
        if keep_cluster:
            return (f"cluster {plan.name} launched, job {job_id}; it stays up when the job ends (billed until "
                    f"`sky down {plan.name}`): copy the model and /tmp/run-node*.json off it first")
        return f"cluster {plan.name} launched, job {job_id}; it is torn down when the job ends (`sky status`)"
    except Exception as exc:
        raise TrainwiseError(f"SkyPilot could not launch {plan.name}: {' '.join(str(exc).split())[:300]}") from None
