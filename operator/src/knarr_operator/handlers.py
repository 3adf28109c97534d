"""The kopf shell: every trigger (create, update, resume, the resync timer) runs one `sync`.

`sync` checks the spec with the worker's own code (a config the worker would refuse is
refused here, before anything rolls out), reads why workers fail from their pods, decides
which spec the workers run (the spec's, or after a missed deadline the last ready one),
renders the desired children (pure), applies what differs, reads the lag, scales (builtin
engine, unless suspended), mirrors backfills and writes the status — each step
idempotent, so replays and restarts are harmless. Events are posted once per change
(a new worker failure, a rollback), never once per resync.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes.dynamic.exceptions import ForbiddenError

from knarr_operator.backfills import FINISHED, SPARK_OPERATOR_TOO_OLD, Observed, Wanted, failed, plan_backfills
from knarr_operator.cluster import Cluster, load_client
from knarr_operator.conditions import CONFIG_REJECTED, DECISIONS, Observation, conditions, merge_transition_times, rejected, workers_ready
from knarr_operator.credentials import kafka_extra_with_secrets, referenced_secrets, secrets_digest
from knarr_operator.crd import GROUP, PLURAL, VERSION
from knarr_operator.failures import Failure, worker_failure
from knarr_operator.keda_auth import KedaAuthError, workers_kafka_auth
from knarr_operator.lag import KafkaUnreachable, LagReaders
from knarr_operator.manifests import PipelineRef, render_children
from knarr_operator.manifests.backfill import pod_templates_kept
from knarr_operator.manifests.meta import PIPELINE_LABEL, RESUME_REPLICAS_ANNOTATION, WORKLOAD_HASH_ANNOTATION, selector
from knarr_operator.manifests.workload import WORKER, last_ready_config_map, last_ready_name
from knarr_operator.preflight import check_debug_volume, preflight
from knarr_operator.rollout import RolloutPlan, RolloutState, plan_rollout, rolled_back_message, with_workload, workload, workload_hash
from knarr_operator.scaling import ReplicaPlan, decide, plan_replicas, pod_consumers
from knarr_operator.settings import OperatorSettings
from knarr_operator.spec import OperatorSpec, SpecError, split_spec
from knarr_operator.timestamps import format_time, parse_time
from knarr_operator.worker_config import InvalidConfig, WorkerConfig, render_worker_config

# Read once, when kopf imports this module at startup (the resync timer's interval is fixed then).
SETTINGS = OperatorSettings.from_env()
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
    # Our own events (Created, Scaled, ConfigRejected, …) say what happened; kopf posts its per-handler
    # log lines as events only when posting.loggers is on, which it is not — so keep posting at INFO,
    # or kopf.info() (every Normal event) would be dropped.
    settings.posting.level = logging.INFO
    settings.execution.max_workers = SETTINGS.max_workers


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


@kopf.timer(GROUP, VERSION, PLURAL, interval=SETTINGS.resync_seconds, initial_delay=SETTINGS.resync_seconds)
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
        config = render_worker_config(worker, spec.env)
        preflight(config, allow_debug=SETTINGS.allow_debug)
        check_debug_volume(spec, config)
        _check_keda(spec, config)
    except (SpecError, InvalidConfig, KedaAuthError) as exc:
        _reject(body, patch, status, new_status, str(exc))
        return

    existing = api.get("apps/v1", "Deployment", ref.namespace, ref.name)
    failure = worker_failure(api.list("v1", "Pod", ref.namespace, _worker_selector(ref)))
    key = workload_hash(body["spec"])
    plan = plan_rollout(
        RolloutState.from_status(status),
        generation=generation,
        key=key,
        restart_nonce=spec.restart_nonce,
        ready=_runs_ready(existing, key),
        suspended=spec.suspend,
        now=time.time(),
        deadline_seconds=spec.rollout.ready_deadline_seconds,
        auto_rollback=spec.rollout.auto_rollback,
        failure=failure,
    )
    if plan.record_ready:
        api.apply(last_ready_config_map(ref, workload(body["spec"]), plan.state.last_ready["generation"], key))
        kopf.info(body, reason="RolledOut", message=f"generation {plan.state.last_ready['generation']}: every worker is ready; "
                                                  f"it is now the spec a failed rollout goes back to")
    spec_run, config_run, key_run = _what_to_run(api, ref, body, plan, (spec, config, key))
    if plan.rolled_back_now:
        kopf.warn(body, reason="RolledBack", message=rolled_back_message(plan.state.rolled_back or {}))

    current = (existing or {}).get("spec", {}).get("replicas")
    replicas = plan_replicas(spec.scaling, suspend=spec.suspend, current=current, remembered=_remembered(existing))
    wanted = referenced_secrets(config_run.secrets, spec_run.env)
    secrets = _read_secrets(api, ref, wanted)
    digest = secrets_digest(wanted, secrets) if wanted and secrets is not None else None
    children = render_children(ref, spec_run, config_run, replicas.replicas, digest,
                               resume_replicas=replicas.resume_replicas, workload_hash=key_run,
                               partitions=status.get("partitions"))
    for manifest in children.workload:
        outcome = api.apply(manifest)
        if outcome != "unchanged":
            kopf.info(body, reason=outcome.capitalize(), message=f"{outcome} {manifest['kind']} {manifest['metadata']['name']}")
    for api_version, kind, name in children.absent:
        if api.kind_installed(api_version, kind) and _owned(api.get(api_version, kind, ref.namespace, name), ref):
            api.delete(api_version, kind, ref.namespace, name)
            kopf.info(body, reason="Deleted", message=f"deleted {kind} {name}")
    _report_suspension(body, api, ref, spec, existing, replicas)

    kafka = config_run.validated.kafka
    kafka_error = None
    try:
        extra = kafka_extra_with_secrets(kafka.extra, config_run.secrets, secrets or {})
        lag = _lag_readers.lag(ref.uid, kafka.brokers, kafka.consumer_group, kafka.source_topic, extra,
                               timeout=SETTINGS.lag_timeout_seconds)
        new_status.update(lag=lag.total, partitions=lag.partitions)
    except KafkaUnreachable as exc:
        kafka_error = str(exc)
        if _reason(status, "Ready") != "KafkaUnreachable":
            kopf.warn(body, reason="KafkaUnreachable", message=kafka_error)
        lag = None

    desired = current if current is not None else spec.scaling.min_replicas
    if spec.scaling.engine == "builtin" and lag is not None and not spec.suspend:
        desired = _autoscale(body, api, ref, spec.scaling, lag, status, new_status,
                             consumers_per_pod=pod_consumers(spec_run, config_run))

    new_status["backfills"] = _sync_backfills(body, api, ref, spec_run, children.backfills, status)

    deployment = api.get("apps/v1", "Deployment", ref.namespace, ref.name) or {}
    dep_status = deployment.get("status") or {}
    new_status["replicas"] = int(dep_status.get("replicas") or 0)
    new_status["readyReplicas"] = int(dep_status.get("readyReplicas") or 0)
    new_status["workerFailure"] = _report_failure(body, status, failure)
    new_status.update(plan.state.to_status())
    observation = Observation(
        generation=generation,
        kafka_error=kafka_error,
        desired_replicas=deployment.get("spec", {}).get("replicas", desired),
        deployment=dep_status if deployment else None,
        deployment_generation=deployment.get("metadata", {}).get("generation"),
        failure=failure,
        suspended=spec.suspend,
        resume_replicas=replicas.resume_replicas,
        rolled_back=plan.state.rolled_back,
        deadline_exceeded=plan.deadline_exceeded,
        deadline_seconds=spec.rollout.ready_deadline_seconds,
    )
    new_status["conditions"] = conditions(observation)
    _write_status(patch, status, new_status)


def _reject(body: Mapping[str, Any], patch: kopf.Patch, status: dict[str, Any], new_status: dict[str, Any], message: str) -> None:
    """The worker would refuse this spec: say so once, change nothing (the old workers keep running)."""
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    if (ready.get("reason"), ready.get("message")) != (CONFIG_REJECTED, message):
        kopf.warn(body, reason=CONFIG_REJECTED, message=message)
    kept = [c for c in status.get("conditions") or [] if c.get("type") in DECISIONS]
    new_status["conditions"] = rejected(message) + kept
    _write_status(patch, status, new_status)


def _check_keda(spec: OperatorSpec, config: WorkerConfig) -> None:
    """With KEDA, its Kafka scaler must be able to sign in as the workers do (raises KedaAuthError)."""
    if spec.scaling.engine == "keda":
        workers_kafka_auth(config)


def _owned(child: Mapping[str, Any] | None, ref: PipelineRef) -> bool:
    """Whether ``child`` exists and this Pipeline owns it: an object someone else made by that name is left alone."""
    return bool(child) and any(o.get("uid") == ref.uid for o in child["metadata"].get("ownerReferences") or [])


def _worker_selector(ref: PipelineRef) -> str:
    return ",".join(f"{k}={v}" for k, v in selector(ref, WORKER).items())


def _runs_ready(deployment: Mapping[str, Any] | None, key: str) -> bool:
    """The Deployment runs workload ``key``, and every one of its (at least one) workers is ready."""
    if not deployment:
        return False
    annotations = deployment.get("metadata", {}).get("annotations") or {}
    wanted = int(deployment.get("spec", {}).get("replicas") or 0)
    status = deployment.get("status") or {}
    return (
        annotations.get(WORKLOAD_HASH_ANNOTATION) == key
        and wanted >= 1
        and workers_ready(status, deployment.get("metadata", {}).get("generation"), wanted)
    )


def _what_to_run(api: Cluster, ref: PipelineRef, body: Mapping[str, Any], plan: RolloutPlan, spec_now: tuple[Any, WorkerConfig, str]) -> tuple[Any, WorkerConfig, str]:
    """The spec's own workload, or after a rollback the last ready one (with the spec's runtime keys)."""
    if not plan.run_last_ready or not plan.state.last_ready:
        return spec_now
    good_hash = str(plan.state.last_ready.get("hash"))
    stored = api.get("v1", "ConfigMap", ref.namespace, last_ready_name(ref)) or {}
    data = stored.get("data") or {}
    if data.get("hash") != good_hash:
        _log.warning("Pipeline %s/%s: ConfigMap %s does not hold the last ready spec (%s); running the current spec",
                     ref.namespace, ref.name, last_ready_name(ref), good_hash)
        return spec_now
    try:
        spec, worker = split_spec(with_workload(body["spec"], json.loads(data["spec.json"])))
        config = render_worker_config(worker, spec.env)
        _check_keda(spec, config)
        return spec, config, good_hash
    except (SpecError, InvalidConfig, ValueError) as exc:
        _log.warning("Pipeline %s/%s: the last ready spec no longer renders (%s); running the current spec", ref.namespace, ref.name, exc)
        return spec_now


def _remembered(deployment: Mapping[str, Any] | None) -> int | None:
    value = ((deployment or {}).get("metadata", {}).get("annotations") or {}).get(RESUME_REPLICAS_ANNOTATION)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _report_suspension(body: Mapping[str, Any], api: Cluster, ref: PipelineRef, spec: Any, existing: Mapping[str, Any] | None, replicas: ReplicaPlan) -> None:
    was_suspended = _remembered(existing) is not None
    if spec.suspend and not was_suspended and existing is not None:
        kopf.info(body, reason="Suspended", message=f"scaled to 0 workers (from {existing.get('spec', {}).get('replicas')}); "
                                                    f"{replicas.resume_replicas} when spec.suspend is false again")
    if replicas.resumed_to is not None:
        if spec.scaling.engine == "keda":
            api.scale(ref.namespace, ref.name, replicas.resumed_to)  # KEDA takes over from here
        kopf.info(body, reason="Resumed", message=f"scaled from 0 to {replicas.resumed_to} workers")


def _report_failure(body: Mapping[str, Any], status: Mapping[str, Any], failure: Failure | None) -> dict[str, str] | None:
    """One event per new reason or message, not one per resync."""
    if failure is None:
        return None
    now = {"reason": failure.reason, "message": failure.message}
    if status.get("workerFailure") != now:
        kopf.warn(body, reason=failure.reason, message=failure.message)
    return now


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


def _autoscale(body: Mapping[str, Any], api: Cluster, ref: PipelineRef, scaling: Any, lag: Any, status: dict[str, Any],
               new_status: dict[str, Any], consumers_per_pod: int = 1) -> int:
    deployment = api.get("apps/v1", "Deployment", ref.namespace, ref.name)
    current = int((deployment or {}).get("spec", {}).get("replicas") or 0)
    decision = decide(
        scaling,
        current=current,
        lag=lag.total,
        partitions=lag.partitions,
        now=time.time(),
        low_lag_since=parse_time(status.get("lowLagSince")),
        consumers_per_pod=consumers_per_pod,
    )
    new_status["lowLagSince"] = format_time(decision.low_lag_since) if decision.low_lag_since is not None else ""
    if decision.changes(current):
        api.scale(ref.namespace, ref.name, decision.replicas)
        kopf.info(body, reason="Scaled", message=f"scaled from {current} to {decision.replicas} workers (lag {lag.total}, {lag.partitions} partitions)")
    return decision.replicas


def _sync_backfills(body: Mapping[str, Any], api: Cluster, ref: PipelineRef, spec: OperatorSpec,
                    manifests: Mapping[str, dict[str, Any]], status: dict[str, Any]) -> list[dict[str, Any]]:
    recorded = status.get("backfills") or []
    if not api.kind_installed(*SPARK):
        if manifests and not any(b.get("phase") == "SparkOperatorMissing" for b in recorded):
            kopf.warn(body, reason="SparkOperatorMissing", message="backfills need the Spark operator (SparkApplication CRD); none is installed")
        return [{"name": n, "phase": "SparkOperatorMissing", "sparkApplication": m["metadata"]["name"], "finished": False} for n, m in manifests.items()]
    existing = api.list(*SPARK, ref.namespace, f"{PIPELINE_LABEL}={ref.name},app.kubernetes.io/component=backfill")
    observed = {
        app["metadata"]["name"]: Observed(
            state=((app.get("status") or {}).get("applicationState") or {}).get("state"),
            created_at=parse_time(app["metadata"].get("creationTimestamp")),
        )
        for app in existing
        if _owned(app, ref)
    }
    wanted = {b.name: Wanted(manifests[b.name]["metadata"]["name"], b.submission_deadline_seconds) for b in spec.backfills}
    plan = plan_backfills(wanted, recorded, observed, time.time())
    statuses = {entry["name"]: entry for entry in plan.statuses}
    for name in plan.submit:
        app = wanted[name].app
        stored = api.create(manifests[name])
        if pod_templates_kept(stored):
            kopf.info(body, reason="BackfillSubmitted", message=f"backfill {name}: created SparkApplication {app}")
            continue
        api.delete(*SPARK, ref.namespace, app)
        statuses[name] = failed(name, app, SPARK_OPERATOR_TOO_OLD,
                                "the installed SparkApplication CRD dropped spec.driver.template, which carries the backfill's "
                                "config and credentials: install the Spark operator 2.1 or later, then add a backfill with a new name")
    for name in plan.expired:
        api.delete(*SPARK, ref.namespace, wanted[name].app)
    for app in plan.remove:
        api.delete(*SPARK, ref.namespace, app)
        kopf.info(body, reason="BackfillRemoved", message=f"deleted SparkApplication {app} (its backfill left the spec)")
    before = {b.get("name"): b.get("phase") for b in recorded}
    for entry in statuses.values():
        if entry["phase"] in FINISHED and before.get(entry["name"]) != entry["phase"]:
            post = kopf.info if entry["phase"] == "COMPLETED" else kopf.warn
            why = f" ({entry['reason']}): {entry['message']}" if entry.get("reason") else ""
            post(body, reason=f"Backfill{entry['phase'].title().replace('_', '')}", message=f"backfill {entry['name']}: {entry['phase']}{why}")
    return list(statuses.values())


def _write_status(patch: kopf.Patch, old: Mapping[str, Any], new: dict[str, Any]) -> None:
    """Patch only what changed: an unchanged status is no write at all."""
    if "conditions" in new:
        new["conditions"] = merge_transition_times(new["conditions"], old.get("conditions") or [], format_time(time.time()))
    for key, value in new.items():
        if old.get(key) != value:
            patch.status[key] = value


def _reason(status: Mapping[str, Any], type_: str) -> str | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_:
            return cond.get("reason")
    return None
