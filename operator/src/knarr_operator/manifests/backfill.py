"""Backfills: each ``spec.backfills[]`` entry becomes one SparkApplication.

The driver and the executors get the workers' config file, credentials and env through
**pod templates** (``spec.driver.template``, ``spec.executor.template``), never through the
Spark operator's ``env``/``volumes``/``volumeMounts`` fields: those are applied by its
mutating webhook, and without the webhook they are dropped silently — the driver would
start without its config. A template is handed to spark-submit as a file by the Spark
operator's controller itself (``spark.kubernetes.{driver,executor}.podTemplateFile``), and
Spark keeps its env (``secretKeyRef`` included) and volumes. It needs Spark >= 3.0 and a
Spark operator >= 2.1 (older CRDs prune the field: see :func:`pod_templates_kept`).
"""

from __future__ import annotations

from typing import Any

from knarr_operator.manifests.meta import PipelineRef, metadata
from knarr_operator.manifests.workload import config_mounts, config_volumes, worker_env
from knarr_operator.spec import Backfill, OperatorSpec, RangeEnd
from knarr_operator.worker_config import CONFIG_PATH, WorkerConfig

SPARK_ENTRY = "local:///opt/knarr/spark_entry.py"
BACKFILL = "backfill"
# The container names the Spark operator tells Spark to take from the pod templates.
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"


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


def pod_template(pipeline: PipelineRef, spec: OperatorSpec, config: WorkerConfig, container: str) -> dict[str, Any]:
    """What a Spark pod shares with a worker pod: the config file, the credentials, the user's env."""
    return {
        "spec": {
            "containers": [{"name": container, "env": worker_env(spec, config), "volumeMounts": config_mounts()}],
            "volumes": config_volumes(pipeline),
        }
    }


def spark_application(pipeline: PipelineRef, spec: OperatorSpec, config: WorkerConfig, backfill: Backfill) -> dict[str, Any]:
    spark = backfill.spark
    labels = {"knarr.dev/backfill": backfill.name}
    driver: dict[str, Any] = {
        "cores": spark.driver_cores,
        "memory": spark.driver_memory,
        "labels": labels,
        "template": pod_template(pipeline, spec, config, DRIVER_CONTAINER),
    }
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
            "timeToLiveSeconds": backfill.time_to_live_seconds,
            "driver": driver,
            "executor": {
                "instances": spark.executors,
                "cores": spark.executor_cores,
                "memory": spark.executor_memory,
                "labels": labels,
                "template": pod_template(pipeline, spec, config, EXECUTOR_CONTAINER),
            },
        },
    }
    manifest["metadata"]["labels"]["knarr.dev/backfill"] = backfill.name
    return manifest


def pod_templates_kept(stored: dict[str, Any]) -> bool:
    """Whether the API server kept the pod templates: a Spark operator before 2.1 has no such field and prunes it."""
    spec = stored.get("spec") or {}
    return all((spec.get(role) or {}).get("template") for role in ("driver", "executor"))
