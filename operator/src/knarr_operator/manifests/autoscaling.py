"""KEDA: with ``scaling.engine: keda`` a ScaledObject scales the Deployment by consumer lag.

Its Kafka trigger signs in as the workers do (see :mod:`knarr_operator.keda_auth`): a
TriggerAuthentication named like the Pipeline points at the workers' Secrets, and at a
ConfigMap ``<name>-keda-auth`` for the plain values KEDA takes only as auth parameters.
"""

from __future__ import annotations

from typing import Any

from knarr_operator.keda_auth import KedaKafkaAuth
from knarr_operator.manifests.meta import PipelineRef, metadata
from knarr_operator.scaling import bounds
from knarr_operator.spec import Scaling
from knarr_operator.worker_config import WorkerConfig

KEDA = "keda.sh/v1alpha1"
WORKER = "worker"  # the component label of everything the workers run with
# KEDA scales the target to this many replicas and leaves it there while the annotation is set.
PAUSED_REPLICAS_ANNOTATION = "autoscaling.keda.sh/paused-replicas"


def trigger_authentication_name(pipeline: PipelineRef) -> str:
    return pipeline.name


def keda_auth_config_map_name(pipeline: PipelineRef) -> str:
    return f"{pipeline.name}-keda-auth"


def scaled_object(pipeline: PipelineRef, scaling: Scaling, config: WorkerConfig, auth: KedaKafkaAuth, *, suspended: bool = False,
                  partitions: int | None = None, consumers_per_pod: int = 1) -> dict[str, Any]:
    """``suspended``: KEDA holds the workers at zero (it would scale them back up to minReplicaCount).

    KEDA's Kafka scaler counts a pod as one consumer: it stops at one pod per partition. A pod of
    ``consumers_per_pod`` worker processes is that many consumers, so once the topic's ``partitions``
    are known (the operator's last look at the lag) the replica range is capped as the builtin engine
    caps it: never more pods than the partitions / the consumers a pod brings."""
    low, high = scaling.min_replicas, scaling.max_replicas
    if partitions and consumers_per_pod > 1:
        low, high = bounds(scaling, partitions, consumers_per_pod)
    kafka = config.validated.kafka
    meta = metadata(pipeline, pipeline.name, WORKER)
    if suspended:
        meta["annotations"] = {PAUSED_REPLICAS_ANNOTATION: "0"}
    trigger: dict[str, Any] = {
        "type": "kafka",
        "metadata": {
            "bootstrapServers": kafka.brokers,
            "consumerGroup": kafka.consumer_group,
            "topic": kafka.source_topic,
            "lagThreshold": str(scaling.lag_per_replica),
            "activationLagThreshold": str(scaling.keda.activation_lag_threshold),
            # Like the workers and the builtin engine: a partition without a commit counts from its start.
            "offsetResetPolicy": "earliest",
            # Like the builtin engine: never more workers than partitions.
            "allowIdleConsumers": "false",
            "limitToPartitionsWithLag": _flag(scaling.keda.limit_to_partitions_with_lag),
            "excludePersistentLag": _flag(scaling.keda.exclude_persistent_lag),
            **auth.metadata,
        },
    }
    if auth.needs_trigger_authentication:
        trigger["authenticationRef"] = {"name": trigger_authentication_name(pipeline), "kind": "TriggerAuthentication"}
    return {
        "apiVersion": KEDA,
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": pipeline.name},
            "minReplicaCount": low,
            "maxReplicaCount": high,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": scaling.scale_down_delay_seconds}}
                }
            },
            "triggers": [trigger],
        },
    }


def trigger_authentication(pipeline: PipelineRef, auth: KedaKafkaAuth) -> dict[str, Any]:
    """Where KEDA reads the Kafka credentials: the workers' own Secrets, and the plain values' ConfigMap."""
    spec: dict[str, Any] = {}
    if auth.from_secrets:
        spec["secretTargetRef"] = [
            {"parameter": parameter, "name": secret, "key": key} for parameter, (secret, key) in sorted(auth.from_secrets.items())
        ]
    if auth.plain:
        spec["configMapTargetRef"] = [
            {"parameter": parameter, "name": keda_auth_config_map_name(pipeline), "key": parameter} for parameter in sorted(auth.plain)
        ]
    return {"apiVersion": KEDA, "kind": "TriggerAuthentication", "metadata": metadata(pipeline, trigger_authentication_name(pipeline), WORKER), "spec": spec}


def keda_auth_config_map(pipeline: PipelineRef, auth: KedaKafkaAuth) -> dict[str, Any]:
    """Plain (non-secret) values KEDA takes only as auth parameters, e.g. a SASL user name or a CA certificate."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(pipeline, keda_auth_config_map_name(pipeline), WORKER), "data": dict(sorted(auth.plain.items()))}


def _flag(value: bool) -> str:
    return "true" if value else "false"
