"""The kopf shell: every trigger (create, update, resume, the resync timer) runs one `sync`.

`sync` renders the desired children (pure), applies what differs, reads the lag,
scales (builtin engine), mirrors backfills and writes the status — each step
idempotent, so replays and restarts are harmless.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes.dynamic.exceptions import ForbiddenError

from knarr_operator.backfills import FINISHED, plan_backfills
from knarr_operator.cluster import Cluster, load_client
from knarr_operator.conditions import Observation, conditions, merge_transition_times
from knarr_operator.credentials import kafka_extra_with_secrets, referenced_secrets, secrets_digest
from knarr_operator.crd import GROUP, PLURAL, VERSION
from knarr_operator.lag import KafkaUnreachable, LagReaders
from knarr_operator.manifests import PipelineRef, render_children
from knarr_operator.manifests.meta import PIPELINE_LABEL
from knarr_operator.scaling import clamp_for_spec, decide
from knarr_operator.spec import SpecError, split_spec
from knarr_operator.worker_config import InvalidConfig, render_worker_config

RESYNC_SECONDS = float(os.environ.get("KNARR_OPERATOR_RESYNC_SECONDS", "15"))
SPARK = ("sparkoperator.k8s.io/v1beta2", "SparkApplication")

_log = logging.getLogger("knarr_operator")
_cluster: Cluster | None = None
_lag_readers = LagReaders()
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def cluster() -> Cluster:
    global _cluster
    if _cluster is None:
        _cluster = Cluster(load_client())
    return _cluster


def _lock(uid: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(uid, threading.Lock())


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Keep kopf's bookkeeping in annotations: the status belongs to kubectl users.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
    # Our own events (Created, Scaled, InvalidConfig, …) say what happened; kopf posts its per-handler
    # log lines as events only when posting.loggers is on, which it is not — so keep posting at INFO,
    # or kopf.info() (every Normal event) would be dropped.
    settings.posting.level = logging.INFO
    settings.execution.max_workers = 8


@kopf.on.cleanup()
def close_clients(**_: Any) -> None:
    _lag_readers.close()


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod: the service account; elsewhere: $KUBECONFIG / ~/.kube/config (as kubectl)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
def on_change(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    sync(body, patch)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_SECONDS, initial_delay=RESYNC_SECONDS)
def on_resync(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    sync(body, patch)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def on_delete(body: kopf.Body, **_: Any) -> None:
    _lag_readers.forget(body["metadata"]["uid"])


def sync(body: Mapping[str, Any], patch: kopf.Patch) -> None:
    with _lock(body["metadata"]["uid"]):
        _sync(body, patch)


def _sync(body: Mapping[str, Any], patch: kopf.Patch) -> None:
    api = cluster()
    ref = PipelineRef.from_body(body)
    status = dict(body.get("status") or {})
    generation = int(body["metadata"].get("generation") or 0)
    new_status: dict[str, Any] = {"observedGeneration": generation}
    try:
        spec, worker = split_spec(body["spec"])
        config = render_worker_config(worker)
    except (SpecError, InvalidConfig) as exc:
        if _reason(status, "Ready") != "InvalidConfig":
            kopf.warn(body, reason="InvalidConfig", message=str(exc))
        new_status["conditions"] = conditions(Observation(generation=generation, invalid_config=str(exc)))
        _write_status(patch, status, new_status)
        return

    existing = api.get("apps/v1", "Deployment", ref.namespace, ref.name)
    current = (existing or {}).get("spec", {}).get("replicas")
    wanted = referenced_secrets(config.secrets, spec.env)
    secrets = _read_secrets(api, ref, wanted)
    digest = secrets_digest(wanted, secrets) if wanted and secrets is not None else None
    children = render_children(ref, spec, config, clamp_for_spec(spec.scaling, current), digest)
    for manifest in children.workload:
        outcome = api.apply(manifest)
        if outcome != "unchanged":
            kopf.info(body, reason=outcome.capitalize(), message=f"{outcome} {manifest['kind']} {manifest['metadata']['name']}")
    for api_version, kind, name in children.absent:
        if api.kind_installed(api_version, kind) and api.get(api_version, kind, ref.namespace, name):
            api.delete(api_version, kind, ref.namespace, name)
            kopf.info(body, reason="Deleted", message=f"deleted {kind} {name}")

    kafka = config.validated.kafka
    kafka_error = None
    try:
        extra = kafka_extra_with_secrets(kafka.extra, config.secrets, secrets or {})
        lag = _lag_readers.lag(ref.uid, kafka.brokers, kafka.consumer_group, kafka.source_topic, extra)
        new_status.update(lag=lag.total, partitions=lag.partitions)
    except KafkaUnreachable as exc:
        kafka_error = str(exc)
        if _reason(status, "Ready") != "KafkaUnreachable":
            kopf.warn(body, reason="KafkaUnreachable", message=kafka_error)
        lag = None

    desired = current if current is not None else spec.scaling.min_replicas
    if spec.scaling.engine == "builtin" and lag is not None:
        desired = _autoscale(body, api, ref, spec.scaling, lag, status, new_status)

    new_status["backfills"] = _sync_backfills(body, api, ref, children.backfills, status)

    deployment = api.get("apps/v1", "Deployment", ref.namespace, ref.name) or {}
    dep_status = deployment.get("status") or {}
    new_status["replicas"] = int(dep_status.get("replicas") or 0)
    new_status["readyReplicas"] = int(dep_status.get("readyReplicas") or 0)
    observation = Observation(
        generation=generation,
        kafka_error=kafka_error,
        desired_replicas=deployment.get("spec", {}).get("replicas", desired),
        deployment=dep_status if deployment else None,
        deployment_generation=deployment.get("metadata", {}).get("generation"),
    )
    new_status["conditions"] = conditions(observation)
    _write_status(patch, status, new_status)


def _read_secrets(api: Cluster, ref: PipelineRef, wanted: list[tuple[str, str]]) -> dict[str, Any] | None:
    """The Secrets the workers read, by name (None for a missing one); None when the operator may not read them."""
    found: dict[str, Any] = {}
    for name in sorted({secret for secret, _ in wanted}):
        try:
            found[name] = api.get("v1", "Secret", ref.namespace, name)
        except ForbiddenError:
            _log.warning("may not read Secret %s/%s: workers will not roll when it changes "
                         "(grant get on secrets: chart value rbac.readSecrets)", ref.namespace, name)
            return None
        if found[name] is None:
            _log.warning("Pipeline %s/%s references Secret %r, which does not exist: its workers cannot start",
                         ref.namespace, ref.name, name)
    return found


def _autoscale(body: Mapping[str, Any], api: Cluster, ref: PipelineRef, scaling: Any, lag: Any, status: dict[str, Any], new_status: dict[str, Any]) -> int:
    deployment = api.get("apps/v1", "Deployment", ref.namespace, ref.name)
    current = int((deployment or {}).get("spec", {}).get("replicas") or 0)
    decision = decide(
        scaling,
        current=current,
        lag=lag.total,
        partitions=lag.partitions,
        now=time.time(),
        low_lag_since=_parse_time(status.get("lowLagSince")),
    )
    new_status["lowLagSince"] = _format_time(decision.low_lag_since) if decision.low_lag_since is not None else ""
    if decision.changes(current):
        api.scale(ref.namespace, ref.name, decision.replicas)
        kopf.info(body, reason="Scaled", message=f"scaled from {current} to {decision.replicas} workers (lag {lag.total}, {lag.partitions} partitions)")
    return decision.replicas


def _sync_backfills(body: Mapping[str, Any], api: Cluster, ref: PipelineRef, wanted: Mapping[str, dict[str, Any]], status: dict[str, Any]) -> list[dict[str, Any]]:
    recorded = status.get("backfills") or []
    if not api.kind_installed(*SPARK):
        if wanted and not any(b.get("phase") == "SparkOperatorMissing" for b in recorded):
            kopf.warn(body, reason="SparkOperatorMissing", message="backfills need the Spark operator (SparkApplication CRD); none is installed")
        return [{"name": n, "phase": "SparkOperatorMissing", "sparkApplication": m["metadata"]["name"], "finished": False} for n, m in wanted.items()]
    existing = api.list(*SPARK, ref.namespace, f"{PIPELINE_LABEL}={ref.name},app.kubernetes.io/component=backfill")
    observed = {
        app["metadata"]["name"]: ((app.get("status") or {}).get("applicationState") or {}).get("state")
        for app in existing
        if any(o.get("uid") == ref.uid for o in app["metadata"].get("ownerReferences") or [])
    }
    plan = plan_backfills({n: m["metadata"]["name"] for n, m in wanted.items()}, recorded, observed)
    for name in plan.submit:
        api.create(wanted[name])
        kopf.info(body, reason="BackfillSubmitted", message=f"backfill {name}: created SparkApplication {wanted[name]['metadata']['name']}")
    for app in plan.remove:
        api.delete(*SPARK, ref.namespace, app)
        kopf.info(body, reason="BackfillRemoved", message=f"deleted SparkApplication {app} (its backfill left the spec)")
    before = {b.get("name"): b.get("phase") for b in recorded}
    for entry in plan.statuses:
        if entry["phase"] in FINISHED and before.get(entry["name"]) != entry["phase"]:
            post = kopf.info if entry["phase"] == "COMPLETED" else kopf.warn
            post(body, reason=f"Backfill{entry['phase'].title().replace('_', '')}", message=f"backfill {entry['name']}: {entry['phase']}")
    return plan.statuses


def _write_status(patch: kopf.Patch, old: Mapping[str, Any], new: dict[str, Any]) -> None:
    """Patch only what changed: an unchanged status is no write at all."""
    if "conditions" in new:
        new["conditions"] = merge_transition_times(new["conditions"], old.get("conditions") or [], _format_time(time.time()))
    for key, value in new.items():
        if old.get(key) != value:
            patch.status[key] = value


def _reason(status: Mapping[str, Any], type_: str) -> str | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_:
            return cond.get("reason")
    return None


def _format_time(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
