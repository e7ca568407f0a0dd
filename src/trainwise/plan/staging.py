"""The dataset the plan stages to cloud machines, taken from a pipeline profile (PRESTO).

`trainwise pipeline profile SPEC --json PIPE.json` measures, per strategy, the storage its offline
part produces for the full dataset (extrapolated when profiled on a sample). The plan stages that
many bytes — the materialised strategy is what is uploaded and read by the training job — so a
strategy that preprocesses at the edge shrinks staging time, egress and storage in every row.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from trainwise.errors import TrainwiseError


def staged_dataset(path: str | Path, strategy_id: str | None = None) -> tuple[float, str]:
    """(GB to stage, where the number comes from) for `strategy_id`, or the profile's selected strategy."""
    from trainwise.pipeline.profiler import PipelineProfile
    from trainwise.pipeline.select import Selection

    from trainwise.userfiles import load_json

    p = Path(path)
    payload = load_json(p, "pipeline profile",
                        missing_hint=f"write one with `trainwise pipeline profile SPEC --json {p}`")
    try:
        profile = PipelineProfile.model_validate(payload["profile"])
        selection = Selection.model_validate(payload["selection"]) if payload.get("selection") else None
    except (KeyError, TypeError, ValidationError):
        raise TrainwiseError(f"{p} is not a pipeline profile (no valid 'profile'): write it with "
                             "`trainwise pipeline profile SPEC --json FILE`") from None
    by_id = {r.strategy_id: r for r in profile.results}
    if strategy_id is None:
        if selection is None:
            raise TrainwiseError(f"{p} records no selected strategy: pass --pipeline-strategy ID")
        strategy_id = selection.best.strategy_id
    if strategy_id not in by_id:
        close = ", ".join(sorted(by_id)[:5])
        raise TrainwiseError(f"strategy {strategy_id!r} is not in {p}: use one of its strategy ids, e.g. {close}")
    result = by_id[strategy_id]
    gb = float(result.storage_bytes_full) / 1e9
    how = (f"pipeline {profile.pipeline}, strategy {strategy_id}: storage measured here on {result.samples} samples"
           + (f", {profile.extrapolation}" if profile.profiled_samples < profile.source_samples else ""))
    return gb, how
