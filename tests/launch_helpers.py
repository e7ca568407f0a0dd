"""Plan documents for the launch tests, built from real rows of the packaged catalog (the plan's
predicted numbers are test inputs, labelled as such)."""

from __future__ import annotations

import sys
from functools import lru_cache

from trainwise.launch.plan_document import ChosenOffering, PlanDocument, Prediction
from trainwise.launch.run_command import HeadIdentity

COMMAND = ["python", "train.py", "--epochs", "3", "--lr", "0.1"]


@lru_cache(maxsize=1)
def catalog():
    from trainwise.catalog import load_catalog

    return load_catalog("packaged")


def plan_for(offering_id: str, *, spot: bool = False, nodes: int = 1, engine: str = "local", per_node: int = 1,
             command: list[str] | None = None, name: str = "mnist-job", training_s: float = 3600.0,
             target_batch_size: int | None = None, **uris: str | None) -> PlanDocument:
    frame = catalog().offerings
    row = frame[frame["offering_id"] == offering_id].iloc[0]
    price = float(row["spot_price_per_hour"] if spot else row["price_per_hour"])
    offering = ChosenOffering(offering_id=offering_id, cloud=row["cloud"], region=row["region"], zone=row["zone"],
                              instance_type=row["instance_type"], accelerator=row["accelerator"],
                              sky_accelerator=row["source_accelerator"], accelerator_count=float(row["accelerator_count"]),
                              spot=spot, kind="cloud", price_per_hour=price, price_source="packaged catalog (test)")
    prediction = Prediction(offering_id=offering_id, epochs=3, batch_size=64, training_s=training_s,
                            wall_s=training_s + 1050, low_s=training_s * 0.9, high_s=training_s * 1.1,
                            cost_usd=price * (training_s + 1050) / 3600, cost_low_usd=0.0, cost_high_usd=price * 2,
                            price_per_hour=price, time_source="test input", price_source="packaged catalog (test)")
    return PlanDocument(created_at="2026-11-22T00:00:00+00:00", name=name, offering=offering, nodes=nodes, engine=engine,
                        processes_per_node=per_node, target_batch_size=target_batch_size,
                        command=list(command or COMMAND), prediction=prediction, **uris)


@lru_cache(maxsize=1)
def head_identity() -> HeadIdentity:
    """A real head identity (hivemind's key format), generated once per test process: a multi-node
    Hivemind task needs one, and SkyPilot checks that the mounted key file exists."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    from trainwise.launch.run_command import write_head_identity

    directory = tempfile.mkdtemp(prefix="tw-identity-")
    atexit.register(shutil.rmtree, directory, True)
    return write_head_identity(Path(directory) / "task.sky.yaml")


def four_plans() -> dict[str, PlanDocument]:
    """Single-node on-demand, single-node spot, multi-node DDP and Hivemind."""
    buckets = {"checkpoint_uri": "s3://tw-checkpoints/mnist", "model_uri": "s3://tw-models/mnist",
               "dataset_uri": "s3://tw-datasets/mnist"}
    return {
        "on-demand": plan_for("aws/use1-az1/p3.2xlarge", name="single-od", model_uri="s3://tw-models/mnist"),
        "spot": plan_for("aws/use1-az1/p3.2xlarge", spot=True, name="single-spot", **buckets),
        "ddp": plan_for("aws/use1-az1/p3.8xlarge", nodes=2, engine="ddp", per_node=4, name="ddp-2x4", **buckets),
        "hivemind": plan_for("gcp/us-central1-a/n1-standard-8+1xT4", spot=True, nodes=4, engine="hivemind",
                             target_batch_size=4096, name="hivemind-4",
                             checkpoint_uri="gs://tw-checkpoints/mnist", model_uri="gs://tw-models/mnist"),
    }


ARGV_RECORDER = f"""#!{sys.executable}
import json, sys
with open(sys.argv[0] + ".calls", "a") as out:
    out.write(json.dumps(sys.argv[1:]) + "\\n")
"""
