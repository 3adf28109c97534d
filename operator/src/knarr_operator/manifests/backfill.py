"""Backfills: each ``spec.backfills[]`` entry becomes one SparkApplication."""

from __future__ import annotations

from typing import Any

from knarr_operator.manifests.meta import PipelineRef, metadata
from knarr_operator.manifests.workload import config_mounts, config_volumes, worker_env
from knarr_operator.spec import Backfill, OperatorSpec, RangeEnd
from knarr_operator.worker_config import CONFIG_PATH, WorkerConfig

SPARK_ENTRY = "local:///opt/knarr/spark_entry.py"
BACKFILL = "backfill"


def spark_application_name(pipeline: PipelineRef, backfill: Backfill) -> str:
    return f"{pipeline.name}-{backfill.name}"


def report_path(backfill: Backfill) -> str:
    return f"/tmp/knarr-backfill-{backfill.name}.json"


def _offsets(end: RangeEnd) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted((end.offsets or {}).items(), key=lambda item: int(item[0])))


def backfill_arguments(handler: str, backfill: Backfill) -> list[str]:
    """The arguments of ``knarr backfill`` (everything after the word ``backfill``)."""
    args = ["--config", CONFIG_PATH, "--handler", handler]
    if backfill.from_.timestamp is not None:
        args += ["--from-timestamp", backfill.from_.timestamp, "--to-timestamp", backfill.to.timestamp or ""]
    else:
        args += ["--from-offsets", _offsets(backfill.from_), "--to-offsets", _offsets(backfill.to)]
    return args + ["--report", report_path(backfill)]


def spark_application(pipeline: PipelineRef, spec: OperatorSpec, config: WorkerConfig, backfill: Backfill) -> dict[str, Any]:
    spark = backfill.spark
    pod = {"env": worker_env(spec, config), "volumeMounts": config_mounts(), "labels": {"knarr.dev/backfill": backfill.name}}
    driver: dict[str, Any] = {"cores": spark.driver_cores, "memory": spark.driver_memory, **pod}
    if spark.service_account:
        driver["serviceAccount"] = spark.service_account
    manifest = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": metadata(pipeline, spark_application_name(pipeline, backfill), BACKFILL),
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": spec.image,
            "imagePullPolicy": spec.image_pull_policy,
            "mainApplicationFile": SPARK_ENTRY,
            "arguments": backfill_arguments(spec.handler, backfill),
            "sparkVersion": spark.spark_version,
            # A backfill runs once; the operator never re-submits a finished one.
            "restartPolicy": {"type": "Never"},
            "volumes": config_volumes(pipeline),
            "driver": driver,
            "executor": {"instances": spark.executors, "cores": spark.executor_cores, "memory": spark.executor_memory, **pod},
        },
    }
    manifest["metadata"]["labels"]["knarr.dev/backfill"] = backfill.name
    return manifest
