"""The worker fleet: ConfigMap, Deployment, metrics Service, debug Service, PodDisruptionBudget."""

from __future__ import annotations

import json
import math
from typing import Any

from knarr.config.models import is_loopback as _is_loopback

from knarr_operator.manifests.meta import (
    CONFIG_HASH_ANNOTATION,
    RESTART_NONCE_ANNOTATION,
    RESUME_REPLICAS_ANNOTATION,
    SECRETS_HASH_ANNOTATION,
    WORKLOAD_HASH_ANNOTATION,
    PipelineRef,
    content_hash,
    labels,
    metadata,
    selector,
)
from knarr_operator.spec import OperatorSpec
from knarr_operator.worker_config import CONFIG_DIR, CONFIG_KEY, CONFIG_PATH, WorkerConfig

WORKER = "worker"
RUN_AS = 10001
# The worker writes why it failed here (knarr.observability.termination); the kubelet shows it in
# the pod's status, falling back to the log's tail when the worker could not write it.
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LOG_ENV = {"name": "KNARR_TERMINATION_LOG", "value": TERMINATION_LOG}
# Time the pod gets beyond the worker's own drain timeout: process exit, final commit, logs.
SHUTDOWN_MARGIN_SECONDS = 30


def config_map_name(pipeline: PipelineRef) -> str:
    return f"{pipeline.name}-config"


def config_map(pipeline: PipelineRef, config: WorkerConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(pipeline, config_map_name(pipeline), WORKER),
        "data": {CONFIG_KEY: config.to_yaml()},
    }


def worker_env(spec: OperatorSpec, config: WorkerConfig) -> list[dict[str, Any]]:
    """The worker's identity, its credentials (env overrides), then the user's env."""
    identity = {"name": config.validated.worker_name_env, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    return [identity, *(ref.env_var() for ref in config.secrets), *spec.env]


def config_volumes(pipeline: PipelineRef) -> list[dict[str, Any]]:
    return [
        {"name": "config", "configMap": {"name": config_map_name(pipeline)}},
        {"name": "tmp", "emptyDir": {}},
    ]


def config_mounts() -> list[dict[str, Any]]:
    return [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]


def _sink_data_volumes(config: WorkerConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The root filesystem is read-only: filesystem sinks get a scratch volume at their base path,
    and the handler cache one at its db_dir (it outlives a container restart, as the pod's name
    and so the cache file's name do)."""
    volumes, mounts = [], []
    for i, (name, sink) in enumerate(sorted(config.validated.sinks.filesystem.items())):
        volumes.append({"name": f"sink-{i}", "emptyDir": {}})
        mounts.append({"name": f"sink-{i}", "mountPath": sink.base_path})
    cache = config.validated.cache
    if cache.enabled and cache.db_dir and not (cache.db_dir + "/").startswith("/tmp/"):
        volumes.append({"name": "cache", "emptyDir": {}})
        mounts.append({"name": "cache", "mountPath": cache.db_dir})
    return volumes, mounts


DEBUG_VOLUME = "debug-db"  # each pod's own emptyDir
SHARED_DEBUG_VOLUME = "debug-shared"  # spec.debugVolume's claim (another name: a volume never changes its type)


def _debug_parts(spec: OperatorSpec, config: WorkerConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """With debug on: the debug UI's container port and a volume at debug.db_dir for the recorder's files.

    With ``spec.debugVolume`` the volume is that PersistentVolumeClaim, shared by every worker so the
    fleet view finds them all (each writes only files named after its pod, see
    :func:`knarr_operator.preflight.check_debug_volume` for what it needs). Without it, a scratch
    emptyDir of the pod's own when db_dir is outside /tmp (the root filesystem is read-only).
    Nothing when debug is off.
    """
    debug = config.validated.debug
    if not debug.enabled:
        return [], [], []
    # With processes: N, worker process i serves its own UI on debug.port + i (the Service reaches the first).
    ports = [{"name": "debug" if i == 0 else f"debug-{i}", "containerPort": debug.port + i, "protocol": "TCP"}
             for i in range(max(1, config.validated.processes))]
    db_dir = debug.db_dir.rstrip("/")
    if spec.debug_volume is not None and db_dir:
        claim = {"claimName": spec.debug_volume.claim_name}
        return (ports, [{"name": SHARED_DEBUG_VOLUME, "persistentVolumeClaim": claim}],
                [{"name": SHARED_DEBUG_VOLUME, "mountPath": db_dir}])
    if not db_dir or db_dir == "/tmp" or db_dir.startswith("/tmp/"):
        return ports, [], []
    return ports, [{"name": DEBUG_VOLUME, "emptyDir": {}}], [{"name": DEBUG_VOLUME, "mountPath": db_dir}]


def deployment(
    pipeline: PipelineRef,
    spec: OperatorSpec,
    config: WorkerConfig,
    replicas: int | None,
    secrets_digest: str | None = None,
    *,
    resume_replicas: int | None = None,
    workload_hash: str | None = None,
) -> dict[str, Any]:
    """``replicas`` None leaves the count to someone else (KEDA's HPA).

    ``secrets_digest`` (see :func:`knarr_operator.credentials.secrets_digest`) goes on the pod
    template: env from a Secret is read once, when a container starts, so a changed Secret
    must change the template for the workers to see it. ``resume_replicas`` is remembered on
    a suspended Deployment; ``workload_hash`` says which spec its template runs.
    """
    port = config.validated.metrics.port
    drain = config.validated.executor.drain_timeout_seconds
    sink_volumes, sink_mounts = _sink_data_volumes(config)
    debug_ports, debug_volumes, debug_mounts = _debug_parts(spec, config)
    container: dict[str, Any] = {
        "name": WORKER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["knarr", "run", "--config", CONFIG_PATH, "--handler", spec.handler],
        "env": [TERMINATION_LOG_ENV, *worker_env(spec, config)],
        "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}, *debug_ports],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "metrics"},
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
        "volumeMounts": config_mounts() + sink_mounts + debug_mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    resources = {k: v for k, v in (("requests", spec.resources.requests), ("limits", spec.resources.limits)) if v}
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": math.ceil(drain) + SHUTDOWN_MARGIN_SECONDS,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": config_volumes(pipeline) + sink_volumes + debug_volumes,
    }
    if spec.service_account_name:
        pod_spec["serviceAccountName"] = spec.service_account_name
    annotations = {CONFIG_HASH_ANNOTATION: content_hash([config.to_yaml(), [r.env_var() for r in config.secrets]])}
    if secrets_digest is not None:
        annotations[SECRETS_HASH_ANNOTATION] = secrets_digest
    if spec.restart_nonce:
        annotations[RESTART_NONCE_ANNOTATION] = spec.restart_nonce
    meta = metadata(pipeline, pipeline.name, WORKER)
    own = {WORKLOAD_HASH_ANNOTATION: workload_hash, RESUME_REPLICAS_ANNOTATION: None if resume_replicas is None else str(resume_replicas)}
    if any(v is not None for v in own.values()):
        meta["annotations"] = {k: v for k, v in own.items() if v is not None}
    manifest: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": selector(pipeline, WORKER)},
            # Never more than one worker away: its partitions are rebalanced onto the others.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {
                "metadata": {"labels": labels(pipeline, WORKER), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }
    if replicas is not None:
        manifest["spec"]["replicas"] = replicas
    return manifest


def metrics_service(pipeline: PipelineRef, config: WorkerConfig) -> dict[str, Any]:
    port = config.validated.metrics.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(pipeline, f"{pipeline.name}-metrics", WORKER),
        "spec": {
            "selector": selector(pipeline, WORKER),
            "ports": [{"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}],
        },
    }


def debug_service_name(pipeline: PipelineRef) -> str:
    return f"{pipeline.name}-debug"


def debug_service(pipeline: PipelineRef, config: WorkerConfig) -> dict[str, Any] | None:
    """The workers' debug UI, for a Pipeline that turns it on and binds it where other pods reach it.

    Bound to a loopback address (the default), only ``kubectl port-forward`` reaches it: no Service.
    """
    debug = config.validated.debug
    if not debug.enabled or _is_loopback(debug.host):
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(pipeline, debug_service_name(pipeline), WORKER),
        "spec": {
            "selector": selector(pipeline, WORKER),
            "ports": [{"name": "debug", "port": debug.port, "targetPort": "debug", "protocol": "TCP"}],
        },
    }


def disruption_budget(pipeline: PipelineRef) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(pipeline, pipeline.name, WORKER),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(pipeline, WORKER)}},
    }


def last_ready_name(pipeline: PipelineRef) -> str:
    return f"{pipeline.name}-last-ready"


def last_ready_config_map(pipeline: PipelineRef, workload: dict[str, Any], generation: int, workload_hash: str) -> dict[str, Any]:
    """The last spec whose workers all became ready: what an automatic rollback goes back to.

    Only the workload part of the spec (see :mod:`knarr_operator.rollout`); it holds no credential
    (those are Secret references: a spec with one inline is never rolled out).
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(pipeline, last_ready_name(pipeline), WORKER),
        "data": {"spec.json": json.dumps(workload, sort_keys=True), "generation": str(generation), "hash": workload_hash},
    }
