"""Everything a Pipeline owns, rendered in one call: spec in, manifests out, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from knarr_operator.keda_auth import workers_kafka_auth
from knarr_operator.manifests.autoscaling import (
    KEDA,
    keda_auth_config_map,
    keda_auth_config_map_name,
    scaled_object,
    trigger_authentication,
    trigger_authentication_name,
)
from knarr_operator.manifests.backfill import spark_application
from knarr_operator.manifests.meta import PipelineRef, with_spec_hash
from knarr_operator.manifests.workload import (
    config_map,
    debug_service,
    debug_service_name,
    deployment,
    disruption_budget,
    metrics_service,
)
from knarr_operator.scaling import pod_consumers
from knarr_operator.spec import OperatorSpec
from knarr_operator.worker_config import WorkerConfig


@dataclass(frozen=True)
class Children:
    """The desired children. ``backfills`` is keyed by backfill name: they are created once, never patched."""

    workload: list[dict[str, Any]]
    backfills: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Kinds the Pipeline may own but should not right now (e.g. a ScaledObject after switching to builtin).
    absent: list[tuple[str, str, str]] = field(default_factory=list)  # (apiVersion, kind, name)


def render_children(
    pipeline: PipelineRef,
    spec: OperatorSpec,
    config: WorkerConfig,
    replicas: int | None,
    secrets_digest: str | None = None,
    *,
    resume_replicas: int | None = None,
    workload_hash: str | None = None,
    partitions: int | None = None,
) -> Children:
    """``replicas``: the Deployment's count under the builtin engine, and 0 with either while suspended.

    ``secrets_digest``: of the Secrets the workers read (None: none referenced, or not readable).
    ``resume_replicas``: remembered on the Deployment while ``spec.suspend`` holds it at zero.
    ``workload_hash``: the spec the workers run (see :mod:`knarr_operator.rollout`).
    ``partitions``: the source topic's, as last seen (None: not yet); KEDA's replica range is capped by them.
    """
    keda = spec.scaling.engine == "keda"
    count = 0 if spec.suspend else None if keda else replicas
    workers = deployment(pipeline, spec, config, count, secrets_digest, resume_replicas=resume_replicas, workload_hash=workload_hash)
    workload = [with_spec_hash(config_map(pipeline, config))]
    absent: list[tuple[str, str, str]] = []
    # KEDA's objects before the Deployment: suspending pauses the ScaledObject before the workers go to
    # zero (KEDA would scale them back up in between), and its sign-in comes before what points at it.
    auth = workers_kafka_auth(config) if keda else None
    if auth is not None and auth.plain:
        workload.append(with_spec_hash(keda_auth_config_map(pipeline, auth)))
    else:
        absent.append(("v1", "ConfigMap", keda_auth_config_map_name(pipeline)))
    if auth is not None and auth.needs_trigger_authentication:
        workload.append(with_spec_hash(trigger_authentication(pipeline, auth)))
    else:
        absent.append((KEDA, "TriggerAuthentication", trigger_authentication_name(pipeline)))
    if auth is not None:
        workload.append(with_spec_hash(scaled_object(pipeline, spec.scaling, config, auth, suspended=spec.suspend,
                                                     partitions=partitions, consumers_per_pod=pod_consumers(spec, config))))
    else:
        absent.append((KEDA, "ScaledObject", pipeline.name))
    workload += [
        with_spec_hash(workers, ignore=("replicas",)),
        with_spec_hash(metrics_service(pipeline, config)),
        with_spec_hash(disruption_budget(pipeline)),
    ]
    debug = debug_service(pipeline, config)
    if debug is not None:
        workload.append(with_spec_hash(debug))
    else:
        absent.append(("v1", "Service", debug_service_name(pipeline)))
    backfills = {b.name: spark_application(pipeline, spec, config, b) for b in spec.backfills}
    return Children(workload=workload, backfills=backfills, absent=absent)
