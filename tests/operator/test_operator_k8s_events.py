"""The operator records what it does as Kubernetes Events on the Pipeline (`kubectl describe pipeline`).

Against a real kube-apiserver + controller-manager (envtest) and a real Kafka broker;
the events are read back as `v1 Event` objects whose involvedObject is the Pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from tests.operator.cluster_helpers import create_pipeline, wait_for
from tests.operator.test_operator_k8s import commit, spec_for
from tests.services.kafka import produce_json

pytestmark = [pytest.mark.k8s, pytest.mark.kafka]

OPERATED = "knarr-ev-"  # namespaces this module's operator watches


def pipeline_events(api, ns: str, name: str) -> list[dict[str, Any]]:
    """The v1 Events in ``ns`` recorded against the Pipeline ``name``, as (type, reason, message) dicts."""
    items = client.CoreV1Api(api.client).list_namespaced_event(ns).items
    return [
        {"type": e.type, "reason": e.reason, "message": e.message}
        for e in items
        if e.involved_object.kind == "Pipeline" and e.involved_object.name == name
    ]


def wait_for_events(api, ns: str, name: str, match: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> list[dict[str, Any]]:
    """Poll until some Pipeline event satisfies ``match``; at the deadline, name every event the Pipeline has."""
    try:
        return wait_for(lambda: [e for e in pipeline_events(api, ns, name) if match(e)], timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; all events on Pipeline {name}: {pipeline_events(api, ns, name)}") from None




def test_creating_a_pipeline_records_a_normal_event_for_each_child_it_created(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    wanted = {"created ConfigMap search-config", "created Deployment search", "created Service search-metrics", "created PodDisruptionBudget search"}
    found: set[str] = set()

    def created(event: dict[str, Any]) -> bool:
        if event["type"] == "Normal" and event["reason"] == "Created":
            found.add(event["message"])
        return wanted <= found

    wait_for_events(api, ns, "search", created, 30, f"Normal/Created events {sorted(wanted)}")


def test_scaling_by_lag_records_a_scaled_event_naming_the_new_replica_count(api, operator, ns, kafka_bootstrap, topic):
    group = f"{topic}-group"
    produce_json(kafka_bootstrap, topic, [{"i": i} for i in range(400)], partition=0)
    produce_json(kafka_bootstrap, topic, [{"i": i} for i in range(400)], partition=1)
    commit(kafka_bootstrap, group, topic, {0: 0, 1: 0, 2: 0, 3: 0})
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic, minReplicas=1, maxReplicas=3, lagPerReplica=100, scaleDownDelaySeconds=300))

    (event,) = wait_for_events(api, ns, "search", lambda e: e["type"] == "Normal" and e["reason"] == "Scaled", 60, "a Normal/Scaled event")
    assert event["message"] == "scaled from 1 to 3 workers (lag 800, 4 partitions)"


def test_a_config_the_worker_rejects_records_a_warning_event_with_reason_config_rejected(api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic)
    spec["kafka"].update(heartbeatIntervalMs=50_000, sessionTimeoutMs=45_000)
    create_pipeline(api, ns, "search", spec)

    (event,) = wait_for_events(api, ns, "search", lambda e: e["reason"] == "ConfigRejected", 30, "a ConfigRejected event")
    assert event["type"] == "Warning"
    assert "heartbeat_interval_ms" in event["message"]
