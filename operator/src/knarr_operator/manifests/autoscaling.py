"""KEDA: with ``scaling.engine: keda`` a ScaledObject scales the Deployment by consumer lag."""

from __future__ import annotations

from typing import Any

from knarr_operator.manifests.meta import PipelineRef, metadata
from knarr_operator.spec import Scaling
from knarr_operator.worker_config import WorkerConfig


# KEDA scales the target to this many replicas and leaves it there while the annotation is set.
PAUSED_REPLICAS_ANNOTATION = "autoscaling.keda.sh/paused-replicas"


def scaled_object(pipeline: PipelineRef, scaling: Scaling, config: WorkerConfig, *, suspended: bool = False) -> dict[str, Any]:
    """``suspended``: KEDA holds the workers at zero (it would scale them back up to minReplicaCount)."""
    kafka = config.validated.kafka
    meta = metadata(pipeline, pipeline.name, "worker")
    if suspended:
        meta["annotations"] = {PAUSED_REPLICAS_ANNOTATION: "0"}
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": pipeline.name},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": scaling.scale_down_delay_seconds}}
                }
            },
            "triggers": [
                {
                    "type": "kafka",
                    "metadata": {
                        "bootstrapServers": kafka.brokers,
                        "consumerGroup": kafka.consumer_group,
                        "topic": kafka.source_topic,
                        "lagThreshold": str(scaling.lag_per_replica),
                        # Like the builtin engine: never more workers than partitions.
                        "allowIdleConsumers": "false",
                    },
                }
            ],
        },
    }
