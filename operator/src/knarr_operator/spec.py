"""The operator's own part of a Pipeline's spec: image, handler, scaling, backfills, ….

The worker's sections (kafka, executor, sinks, …) are not repeated here: their
schema is generated from the worker's models (see :mod:`knarr_operator.crd`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
INT_OR_STRING = {"x-kubernetes-int-or-string": True}


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class KedaTrigger(_Part):
    """How KEDA's Kafka scaler counts the lag (``engine: keda`` only)."""

    activation_lag_threshold: int = Field(
        0, ge=0, le=1_000_000_000,
        description="Below this lag the workers may scale to zero (with minReplicas 0); above it KEDA activates them.",
    )
    limit_to_partitions_with_lag: bool = Field(
        False, description="Never more workers than partitions that have lag (not merely than partitions).",
    )
    exclude_persistent_lag: bool = Field(
        False,
        description="Leave out partitions whose consumer has not moved since the last check (a stuck partition "
                    "adds no workers: more would not unstick it).",
    )


class Scaling(_Part):
    """How many workers run: a fixed range scaled by consumer lag, by the operator or by KEDA."""

    min_replicas: int = Field(1, ge=0, le=1000, description="Fewest workers, whatever the lag.")
    max_replicas: int = Field(10, ge=1, le=1000, description="Most workers; never more than the source topic's partitions either.")
    lag_per_replica: int = Field(
        1000, ge=1, le=1_000_000_000,
        description="Consumer lag (messages) one worker is expected to keep up with (KEDA's lagThreshold).",
    )
    scale_down_delay_seconds: int = Field(300, ge=0, le=86_400, description="Lag must stay low this long before workers are removed.")
    engine: Literal["builtin", "keda"] = Field("builtin", description="builtin: the operator scales; keda: a KEDA ScaledObject does.")
    keda: KedaTrigger = Field(default_factory=KedaTrigger)


class RangeEnd(_Part):
    """One end of a backfill range: a timestamp, or an offset per partition."""

    timestamp: str | None = Field(None, description="RFC 3339 time, e.g. 2026-11-01T00:00:00Z.", json_schema_extra={"format": "date-time"})
    offsets: dict[str, int] | None = Field(None, description='Offset per partition, e.g. {"0": 100, "1": 250}.')


    @field_validator("offsets")
    @classmethod
    def _partition_numbers(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        for partition in value or {}:
            if not partition.isdigit():
                raise ValueError(f"offsets key {partition!r} is not a partition number; write {{\"0\": 100, \"1\": 250}}")
        return value


class SparkResources(_Part):
    """Size of the Spark job that runs a backfill."""

    executors: int = Field(2, ge=1, le=1000, description="Spark executor instances.")
    executor_cores: int = Field(1, ge=1, le=256)
    executor_memory: str = Field("2g", description="Spark memory string, e.g. 4g.")
    driver_cores: int = Field(1, ge=1, le=256)
    driver_memory: str = Field("1g")
    spark_version: str = Field(
        "3.5.3", pattern=r"^([3-9]|[1-9][0-9]+)\.[0-9]+\.[0-9]+$",
        description="Spark version of the image, as the Spark operator wants it; 3.0.0 or later "
                    "(the driver and executors get their config and credentials through pod templates).",
    )
    service_account: str = Field("", description="Service account of the driver (it creates executor pods); empty: the namespace default.")


class Backfill(_Part):
    """Reprocess a range of the source topic with a Spark job (SparkApplication)."""

    name: str = Field(..., max_length=40, pattern=DNS_LABEL, description="Unique per Pipeline; names the SparkApplication <pipeline>-<name>.")
    from_: RangeEnd = Field(..., alias="from", description="Start of the range (inclusive).")
    to: RangeEnd = Field(..., description="End of the range (exclusive).")
    spark: SparkResources = Field(default_factory=SparkResources)
    time_to_live_seconds: int = Field(
        86_400, ge=60, le=31_536_000,
        description="The Spark operator deletes the finished SparkApplication (and its driver pod) this long after "
                    "it ends; the outcome stays in the Pipeline's status.",
    )
    submission_deadline_seconds: int = Field(
        900, ge=10, le=86_400,
        description="The SparkApplication must be running (or finished) this long after it was created; "
                    "else the backfill fails (SubmissionDeadlineExceeded) and the SparkApplication is deleted.",
    )


class Resources(_Part):
    """Compute resources of each worker container."""

    requests: dict[str, str] = Field(default_factory=dict, description="Resources each worker is guaranteed, e.g. {cpu: 250m, memory: 256Mi}.", json_schema_extra={"x-schema": {"type": "object", "additionalProperties": INT_OR_STRING}})
    limits: dict[str, str] = Field(default_factory=dict, description="Most resources each worker may use.", json_schema_extra={"x-schema": {"type": "object", "additionalProperties": INT_OR_STRING}})


ENV_VAR_SCHEMA = {
    "type": "array",
    "description": "Extra environment of the workers (Kubernetes EnvVar: value or valueFrom.secretKeyRef, …).",
    "items": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1, "description": "Name of the environment variable."}},
        "x-kubernetes-preserve-unknown-fields": True,
    },
}


class Rollout(_Part):
    """How a new spec is rolled out, and what happens when its workers do not become ready."""

    ready_deadline_seconds: int = Field(
        600, ge=5, le=86_400,
        description="A new spec's workers must all be ready within this long after it was first seen; "
                    "else (with autoRollback) the workers go back to the last spec that was ready.",
    )
    auto_rollback: bool = Field(
        True,
        description="Roll the workers back to the last spec that was ready when a new one misses readyDeadlineSeconds. "
                    "A later change of the spec (or of restartNonce) tries again.",
    )


class DebugVolume(_Part):
    """A volume the workers share for the flight recorder's files (``debug.dbDir``), so the debug UI's fleet
    view sees every worker of the Pipeline, not only the one it runs on."""

    claim_name: str = Field(
        ..., min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="An existing PersistentVolumeClaim in the Pipeline's namespace, ReadWriteMany (every worker "
                    "mounts it at debug.dbDir, in place of each pod's own emptyDir), writable by uid/gid 10001.",
    )


class OperatorSpec(_Part):
    """The operator-only fields of a Pipeline's spec."""

    image: str = Field(..., min_length=1, description="The handler image, built FROM knarr's worker image.")
    handler: str = Field(..., pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", description="module.path:ClassName of the handler.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent")
    service_account_name: str = Field("", description="Service account of the worker pods; empty: the namespace default.")
    scaling: Scaling = Field(default_factory=Scaling)
    resources: Resources = Field(default_factory=Resources)
    env: list[dict[str, Any]] = Field(default_factory=list, json_schema_extra={"x-schema": ENV_VAR_SCHEMA})
    backfills: list[Backfill] = Field(default_factory=list, max_length=20, description="Ranges of the source topic to reprocess, each once, as a Spark job.")
    suspend: bool = Field(
        False,
        description="Scale the workers to zero and keep them there (the autoscaler too); the Deployment, its config, "
                    "the status and the consumer group's committed offsets stay. false again restores the replica count.",
    )
    restart_nonce: str = Field(
        "", max_length=253,
        description="Any new value rolls the workers (a pod-template annotation), e.g. a timestamp; "
                    "it also retries a spec that was rolled back.",
    )
    rollout: Rollout = Field(default_factory=Rollout)
    debug_volume: DebugVolume | None = Field(
        None,
        description="Mount this PersistentVolumeClaim at debug.dbDir in every worker, so their recorder files meet "
                    "in one directory and the debug UI's fleet view merges them; needs debug.enabled and a "
                    "debug.dbDir of its own (not '' nor /tmp). Unset: each worker keeps its files in its own pod.",
    )


# Fields that say how many workers run and what else runs beside them, not what each worker runs:
# changing them starts no rollout of a new spec, and a rollback keeps their current values.
RUNTIME_KEYS = frozenset({"scaling", "backfills", "suspend", "restartNonce", "rollout"})


OPERATOR_KEYS = frozenset(f.alias or k for k, f in OperatorSpec.model_fields.items())


class SpecError(ValueError):
    """The operator's part of the spec is unusable (the API server normally catches this first)."""


def split_spec(spec: Mapping[str, Any]) -> tuple[OperatorSpec, dict[str, Any]]:
    """Split a Pipeline's spec into the operator's part (parsed) and the worker's part (camelCase)."""
    ours = {k: v for k, v in spec.items() if k in OPERATOR_KEYS}
    worker = {k: v for k, v in spec.items() if k not in OPERATOR_KEYS}
    try:
        return OperatorSpec.model_validate(ours), worker
    except ValidationError as exc:
        problems = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise SpecError(problems) from None
