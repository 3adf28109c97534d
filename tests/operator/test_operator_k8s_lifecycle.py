"""Why workers fail, and what the operator does about it: termination reasons, refused configs,
suspend/resume, restarts and automatic rollback.

Against a real kube-apiserver + controller-manager (envtest) and a real Kafka broker, with the
operator in its own process. There is no kubelet: the tests write into the real worker Pods'
status what a kubelet would (see tests/operator/kubelet.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.operator.cluster_helpers import (
    condition,
    create_pipeline,
    get,
    patch_pipeline,
    pipeline,
    wait_for,
)
from tests.operator.kubelet import crash_loop, run_ready, worker_pods
from tests.operator.test_operator_k8s import commit, spec_for
from tests.operator.test_operator_k8s_events import pipeline_events, wait_for_events
from tests.services.kafka import committed_offsets, produce_json

pytestmark = [pytest.mark.k8s, pytest.mark.kafka]

OPERATED = "knarr-lc-"  # namespaces this module's operator watches
UNREACHABLE = ("ServiceUnavailable: dead-letter queue (topic 'search-requests_dlq'): cannot reach Kafka at 'kafka:9092' "
               "within 30s: Connect to ipv4#10.0.0.9:9092 failed: Connection refused")
NO_HANDLER = ("HandlerRejected: handler 'search.handler:SearchHandler': cannot import module 'search.handler' "
              "(No module named 'search'); is it on PYTHONPATH?")


def deployment(api, ns: str) -> dict[str, Any]:
    return get(api, "apps/v1", "Deployment", ns, "search") or {}


def replicas(api, ns: str) -> int | None:
    return deployment(api, ns).get("spec", {}).get("replicas")


def template_annotations(api, ns: str) -> dict[str, str]:
    return deployment(api, ns).get("spec", {}).get("template", {}).get("metadata", {}).get("annotations") or {}


def a_sync_later(api, ns: str, kafka_bootstrap: str, topic: str) -> None:
    """Wait until the operator has synced again: it reports the lag of a message produced now."""
    before = pipeline(api, ns, "search").get("status", {}).get("lag")
    produce_json(kafka_bootstrap, topic, [{"marker": True}], partition=3)
    wait_for(lambda: (lag := pipeline(api, ns, "search").get("status", {}).get("lag")) is not None and lag != before,
             30, "a sync reporting the new lag")


def running_pods(api, ns: str, count: int, config_hash: str | None = None) -> list[dict[str, Any]]:
    """Wait for ``count`` worker pods (of the pod template with ``config_hash``, if given)."""
    def found():
        pods = [p for p in worker_pods(api, ns, "search")
                if config_hash is None or p["metadata"].get("annotations", {}).get("knarr.dev/config-hash") == config_hash]
        return pods if len(pods) == count else None
    return wait_for(found, 60, f"{count} worker pod(s)")


def all_ready(api, ns: str, count: int = 1) -> None:
    """Play the kubelet: the workers start and pass their readiness probe."""
    for pod in running_pods(api, ns, count, template_annotations(api, ns).get("knarr.dev/config-hash")):
        run_ready(api, ns, pod)


# --- worker failure reasons -------------------------------------------------------------------


def test_a_workers_termination_reason_becomes_the_ready_reason_with_one_event_per_new_message(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    (pod,) = running_pods(api, ns, 1)
    crash_loop(api, ns, pod, UNREACHABLE + "\n", exit_code=3)
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "Ready").get("reason") == "ServiceUnavailable" and b,
                    30, "Ready reason ServiceUnavailable")
    message = UNREACHABLE.removeprefix("ServiceUnavailable: ")
    assert condition(body, "Ready")["status"] == "False" and condition(body, "Ready")["message"] == message
    assert (condition(body, "Degraded")["status"], condition(body, "Degraded")["reason"]) == ("True", "ServiceUnavailable")
    assert body["status"]["workerFailure"] == {"reason": "ServiceUnavailable", "message": message}
    a_sync_later(api, ns, kafka_bootstrap, topic)
    a_sync_later(api, ns, kafka_bootstrap, topic)
    warnings = [e for e in pipeline_events(api, ns, "search") if e["reason"] == "ServiceUnavailable"]
    assert warnings == [{"type": "Warning", "reason": "ServiceUnavailable", "message": message}]

    crash_loop(api, ns, pod, NO_HANDLER, exit_code=2)
    wait_for_events(api, ns, "search", lambda e: e["reason"] == "HandlerRejected", 30, "a HandlerRejected event")
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "Ready").get("reason") == "HandlerRejected" and b,
                    30, "Ready reason HandlerRejected")
    assert condition(body, "Ready")["message"] == NO_HANDLER.removeprefix("HandlerRejected: ")

    run_ready(api, ns, pod)
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "Ready").get("status") == "True" and b,
                    30, "Ready once the worker is ready")
    assert "workerFailure" not in body["status"]
    assert condition(body, "Degraded")["status"] == "False"


def test_a_config_the_worker_would_refuse_is_not_rolled_out_and_the_old_workers_keep_running(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    before = wait_for(lambda: deployment(api, ns) or None, 60, "the Deployment")
    config_before = get(api, "v1", "ConfigMap", ns, "search-config")["data"]
    # Valid for the API server's schema; librdkafka, which the worker asks at startup, refuses it.
    patch_pipeline(api, ns, "search", {"kafka": {"extra": {"fetch.max.bytes": "lots"}}, "executor": {"windowSize": 7}})
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "Ready").get("reason") == "ConfigRejected" and b,
                    30, "Ready reason ConfigRejected")
    message = condition(body, "Ready")["message"]
    assert message.startswith("the worker would refuse to start with this configuration (keys under spec):\n"
                              "  kafka.extra.fetch.max.bytes: the Kafka client (librdkafka) refuses these consumer settings")
    assert (condition(body, "Progressing")["reason"], condition(body, "Degraded")["status"]) == ("ConfigRejected", "True")
    (event,) = wait_for_events(api, ns, "search", lambda e: e["reason"] == "ConfigRejected", 30, "a ConfigRejected event")
    assert (event["type"], event["message"]) == ("Warning", message)
    # Another change that is refused for the same reason: seen (observedGeneration), but no second event.
    patch_pipeline(api, ns, "search", {"scaling": {"maxReplicas": 11}})
    generation = pipeline(api, ns, "search")["metadata"]["generation"]
    wait_for(lambda: pipeline(api, ns, "search")["status"]["observedGeneration"] == generation, 30, "the next change seen")
    after = deployment(api, ns)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]
    assert get(api, "v1", "ConfigMap", ns, "search-config")["data"] == config_before
    assert len([e for e in pipeline_events(api, ns, "search") if e["reason"] == "ConfigRejected"]) == 1


# --- suspend, resume, restart -----------------------------------------------------------------


def test_suspend_holds_the_workers_at_zero_and_resume_restores_the_count_from_before(api, operator, ns, kafka_bootstrap, topic):
    group = f"{topic}-group"
    for partition in range(3):
        produce_json(kafka_bootstrap, topic, [{"i": i} for i in range(100)], partition=partition)
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic, minReplicas=1, maxReplicas=3, lagPerReplica=100,
                                                scaleDownDelaySeconds=600))
    wait_for(lambda: replicas(api, ns) == 3, 60, "3 workers for a lag of 300")

    patch_pipeline(api, ns, "search", {"suspend": True})
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "Suspended").get("status") == "True" and b,
                    30, "Suspended=True")
    assert replicas(api, ns) == 0
    assert deployment(api, ns)["metadata"]["annotations"]["knarr.dev/resume-replicas"] == "3"
    assert condition(body, "Ready")["reason"] == "Suspended"
    assert condition(body, "Suspended")["message"].startswith("the workers are scaled to 0; 3 when resumed")
    wait_for_events(api, ns, "search", lambda e: e["reason"] == "Suspended", 30, "a Suspended event")
    # The lag (301 after this marker) would call for 3 workers: the builtin autoscaler leaves a suspended Pipeline alone.
    a_sync_later(api, ns, kafka_bootstrap, topic)
    a_sync_later(api, ns, kafka_bootstrap, topic)
    assert replicas(api, ns) == 0
    assert get(api, "v1", "ConfigMap", ns, "search-config") is not None

    # With no lag left, the autoscaler alone would go down to 1 (after the scale-down delay): 3 comes from the suspend.
    commit(kafka_bootstrap, group, topic, {0: 100, 1: 100, 2: 100, 3: 2})
    wait_for(lambda: pipeline(api, ns, "search")["status"].get("lag") == 0, 30, "lag 0 while suspended")
    patch_pipeline(api, ns, "search", {"suspend": False})
    wait_for(lambda: replicas(api, ns) == 3, 30, "3 workers again")
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "Suspended").get("status") == "False" and b,
                    30, "Suspended=False")
    assert "knarr.dev/resume-replicas" not in (deployment(api, ns)["metadata"].get("annotations") or {})
    (event,) = wait_for_events(api, ns, "search", lambda e: e["reason"] == "Resumed", 30, "a Resumed event")
    assert event["message"] == "scaled from 0 to 3 workers"
    a_sync_later(api, ns, kafka_bootstrap, topic)
    assert replicas(api, ns) == 3


def test_suspend_with_keda_pauses_the_scaled_object_at_zero_and_resume_restores_the_count(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic, engine="keda"))
    wait_for(lambda: get(api, "keda.sh/v1alpha1", "ScaledObject", ns, "search"), 60, "the ScaledObject")
    # KEDA's HPA sets the count: here, two workers.
    api.resources.get(api_version="apps/v1", kind="Deployment").patch(
        name="search", namespace=ns, body={"spec": {"replicas": 2}}, content_type="application/merge-patch+json")

    patch_pipeline(api, ns, "search", {"suspend": True})
    wait_for(lambda: replicas(api, ns) == 0, 30, "0 workers")
    scaled = get(api, "keda.sh/v1alpha1", "ScaledObject", ns, "search")
    assert scaled["metadata"]["annotations"]["autoscaling.keda.sh/paused-replicas"] == "0"

    patch_pipeline(api, ns, "search", {"suspend": False})
    wait_for(lambda: replicas(api, ns) == 2, 30, "2 workers again")
    wait_for(lambda: "autoscaling.keda.sh/paused-replicas" not in
             (get(api, "keda.sh/v1alpha1", "ScaledObject", ns, "search")["metadata"].get("annotations") or {}),
             30, "the ScaledObject no longer paused")


def test_suspend_and_resume_leave_the_consumer_groups_committed_offsets_untouched(api, operator, ns, kafka_bootstrap, topic):
    group = f"{topic}-group"
    for partition in range(4):
        produce_json(kafka_bootstrap, topic, [{"i": i} for i in range(10)], partition=partition)
    commit(kafka_bootstrap, group, topic, {0: 5, 1: 7, 2: 3, 3: 10})
    before = committed_offsets(kafka_bootstrap, group, topic)
    assert before == {0: 5, 1: 7, 2: 3, 3: 10}
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    wait_for(lambda: pipeline(api, ns, "search").get("status", {}).get("lag") == 15, 60, "the lag of the committed group")

    patch_pipeline(api, ns, "search", {"suspend": True})
    wait_for(lambda: condition(pipeline(api, ns, "search"), "Suspended").get("status") == "True" and replicas(api, ns) == 0,
             30, "suspended")
    a_sync_later(api, ns, kafka_bootstrap, topic)
    assert committed_offsets(kafka_bootstrap, group, topic) == before
    patch_pipeline(api, ns, "search", {"suspend": False})
    wait_for(lambda: condition(pipeline(api, ns, "search"), "Suspended").get("status") == "False" and replicas(api, ns) == 1,
             30, "resumed")
    a_sync_later(api, ns, kafka_bootstrap, topic)
    assert committed_offsets(kafka_bootstrap, group, topic) == before


def test_a_new_restart_nonce_rolls_the_workers(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    (first,) = running_pods(api, ns, 1)
    generation = wait_for(lambda: deployment(api, ns).get("metadata", {}).get("generation"), 60, "the Deployment")
    patch_pipeline(api, ns, "search", {"restartNonce": "2026-11-23T12:00:00Z"})
    wait_for(lambda: template_annotations(api, ns).get("knarr.dev/restart-nonce") == "2026-11-23T12:00:00Z", 30, "the nonce on the template")
    assert deployment(api, ns)["metadata"]["generation"] == generation + 1
    (second,) = wait_for(lambda: (p := running_pods(api, ns, 1)) and p[0]["metadata"]["name"] != first["metadata"]["name"] and p,
                         60, "a new worker pod")
    assert second["metadata"]["annotations"]["knarr.dev/restart-nonce"] == "2026-11-23T12:00:00Z"


# --- automatic rollback -----------------------------------------------------------------------


def test_a_spec_not_ready_by_its_deadline_is_rolled_back_to_the_last_ready_one_and_a_new_change_tries_again(api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic)
    spec["rollout"] = {"readyDeadlineSeconds": 10}
    create_pipeline(api, ns, "search", spec)
    wait_for(lambda: deployment(api, ns).get("metadata"), 60, "the Deployment")
    all_ready(api, ns)
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and b.get("status", {}).get("lastReadySpec") and b,
                    30, "generation 1 remembered as ready")
    assert body["status"]["lastReadySpec"]["generation"] == 1
    wait_for_events(api, ns, "search", lambda e: e["reason"] == "RolledOut", 30, "a RolledOut event")
    good = template_annotations(api, ns)["knarr.dev/config-hash"]
    assert "window_size: 20" in get(api, "v1", "ConfigMap", ns, "search-config")["data"]["config.yaml"]

    patch_pipeline(api, ns, "search", {"executor": {"windowSize": 7}})  # generation 2: its worker cannot load the handler
    bad = wait_for(lambda: (h := template_annotations(api, ns).get("knarr.dev/config-hash")) != good and h, 30, "the new template")
    (pod,) = running_pods(api, ns, 1, bad)
    crash_loop(api, ns, pod, NO_HANDLER, exit_code=2)

    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "RolledBack").get("status") == "True" and b,
                    30, "RolledBack=True")
    rolled = condition(body, "RolledBack")
    assert rolled["reason"] == "HandlerRejected"
    assert rolled["message"].startswith(
        f"generation 2 was not ready within 10s ({NO_HANDLER}); the workers run generation 1's spec again")
    assert template_annotations(api, ns)["knarr.dev/config-hash"] == good
    assert "window_size: 20" in get(api, "v1", "ConfigMap", ns, "search-config")["data"]["config.yaml"]
    (event,) = wait_for_events(api, ns, "search", lambda e: e["reason"] == "RolledBack", 30, "a RolledBack event")
    assert (event["type"], event["message"]) == ("Warning", rolled["message"])
    a_sync_later(api, ns, kafka_bootstrap, topic)
    assert template_annotations(api, ns)["knarr.dev/config-hash"] == good  # it stays rolled back
    assert len([e for e in pipeline_events(api, ns, "search") if e["reason"] == "RolledBack"]) == 1

    patch_pipeline(api, ns, "search", {"executor": {"windowSize": 9}})  # generation 3: tried
    wait_for(lambda: "window_size: 9" in get(api, "v1", "ConfigMap", ns, "search-config")["data"]["config.yaml"], 30, "the new config")
    assert template_annotations(api, ns)["knarr.dev/config-hash"] not in (good, bad)
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "RolledBack").get("status") == "False" and b,
                    30, "RolledBack=False")
    assert body["status"]["rollout"]["generation"] == 3
