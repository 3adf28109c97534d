"""The operator against a real kube-apiserver + controller-manager (envtest) and a real Kafka broker."""

from __future__ import annotations

import copy
import json
import secrets
import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from kubernetes.dynamic.exceptions import UnprocessibleEntityError

from knarr.kafka.clients import close_consumer, open_consumer

from tests.operator.cluster_helpers import (
    apps,
    condition,
    create_pipeline,
    get,
    namespace,
    patch_pipeline,
    pipeline,
    running_operator,
    set_spark_state,
    wait_for,
)
from tests.operator.conftest import SAMPLE_SPEC
from tests.services.kafka import produce_json

pytestmark = [pytest.mark.k8s, pytest.mark.kafka]

OPERATED = "knarr-op-"  # namespaces the shared operator watches


@pytest.fixture(scope="module")
def operator(api, kubeconfig):
    with running_operator(kubeconfig, f"{OPERATED}*") as runner:
        yield runner


def spec_for(kafka_bootstrap: str, topic: str, **scaling: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SAMPLE_SPEC)
    # The operator refuses what the worker would (a sink type it cannot build included): keep to the
    # Kafka and filesystem sinks every worker version has; the database sink is for the rendering tests.
    del spec["sinks"]["postgres"]
    spec["kafka"] = {"brokers": kafka_bootstrap, "sourceTopic": topic, "consumerGroup": f"{topic}-group"}
    spec["scaling"].update(scaling)
    return spec


def children(api, ns: str, name: str) -> dict[str, dict[str, Any] | None]:
    return {
        "ConfigMap": get(api, "v1", "ConfigMap", ns, f"{name}-config"),
        "Deployment": get(api, "apps/v1", "Deployment", ns, name),
        "Service": get(api, "v1", "Service", ns, f"{name}-metrics"),
        "PodDisruptionBudget": get(api, "policy/v1", "PodDisruptionBudget", ns, name),
    }


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit offsets for a group that has no running consumer."""
    consumer = open_consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        close_consumer(consumer)


def test_an_invalid_pipeline_is_rejected_by_the_api_server_naming_the_field(api, ns):
    spec = copy.deepcopy(SAMPLE_SPEC)
    spec["scaling"].update(minReplicas=9, maxReplicas=3)
    spec["backfills"][0]["to"] = {"timestamp": "2026-10-01T00:00:00Z"}
    with pytest.raises(UnprocessibleEntityError) as err:
        create_pipeline(api, ns, "bad", spec)
    message = str(err.value.body)
    assert "spec.scaling.minReplicas" in message and "minReplicas must not exceed maxReplicas" in message
    assert "spec.backfills[0].from.timestamp" in message and "must be before to.timestamp" in message


def test_a_pipeline_missing_a_required_worker_key_is_rejected_naming_it(api, ns):
    spec = copy.deepcopy(SAMPLE_SPEC)
    spec["sinks"]["kafka"]["results"] = {}
    with pytest.raises(UnprocessibleEntityError) as err:
        create_pipeline(api, ns, "bad", spec)
    assert "spec.sinks.kafka.results.topic: Required value" in str(err.value.body)


def test_duplicate_backfill_names_are_rejected(api, ns):
    spec = copy.deepcopy(SAMPLE_SPEC)
    spec["backfills"].append(copy.deepcopy(spec["backfills"][0]))
    with pytest.raises(UnprocessibleEntityError) as err:
        create_pipeline(api, ns, "dup", spec)
    assert "backfill names must be unique" in str(err.value.body)


def test_creating_a_pipeline_creates_its_children_owned_by_it(api, operator, ns, kafka_bootstrap, topic):
    created = create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    found = wait_for(lambda: all(children(api, ns, "search").values()) and children(api, ns, "search"), 60, "children")
    for kind, child in found.items():
        (owner,) = child["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("Pipeline", created["metadata"]["uid"], True), kind
    config = found["ConfigMap"]["data"]["config.yaml"]
    assert f"source_topic: {topic}" in config and "dsn" not in config
    container = found["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-1] == "search.handler:SearchHandler"
    assert found["Deployment"]["spec"]["replicas"] == 1
    # A broker read that times out on a loaded machine shows as Degraded until the next resync
    # (1 s here) reads the lag again: wait for the settled status, not the first one.
    body = wait_for(
        lambda: (b := pipeline(api, ns, "search")).get("status", {}).get("observedGeneration")
        and condition(b, "Degraded").get("status") == "False" and b,
        30, "a status with Degraded=False",
    )
    assert condition(body, "Ready")["status"] == "False"  # no kubelet here: pods never become ready
    assert body["status"]["lag"] == 0


def test_a_config_change_updates_the_configmap_and_rolls_the_pods(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    first = wait_for(lambda: get(api, "apps/v1", "Deployment", ns, "search"), 60, "deployment")
    old_hash = first["spec"]["template"]["metadata"]["annotations"]["knarr.dev/config-hash"]
    patch_pipeline(api, ns, "search", {"executor": {"windowSize": 7}})
    wait_for(lambda: "window_size: 7" in (get(api, "v1", "ConfigMap", ns, "search-config") or {}).get("data", {}).get("config.yaml", ""), 60, "new config")
    rolled = wait_for(
        lambda: (d := get(api, "apps/v1", "Deployment", ns, "search"))["spec"]["template"]["metadata"]["annotations"]["knarr.dev/config-hash"] != old_hash and d,
        30,
        "new pod template hash",
    )
    assert rolled["metadata"]["generation"] > first["metadata"]["generation"]


def secrets_hash(deployment: dict[str, Any] | None) -> str | None:
    return ((deployment or {}).get("spec", {}).get("template", {}).get("metadata", {}).get("annotations") or {}).get("knarr.dev/secrets-hash")


def test_a_changed_secret_rolls_the_pods_and_no_credential_reaches_the_configmap(api, operator, ns, kafka_bootstrap, topic):
    secrets = api.resources.get(api_version="v1", kind="Secret")
    secrets.create(namespace=ns, body={"metadata": {"name": "sink-auth"}, "stringData": {"password": "sink-password"}})
    secrets.create(namespace=ns, body={"metadata": {"name": "kafka-auth"}, "stringData": {"password": "first-password"}})
    spec = spec_for(kafka_bootstrap, topic)
    spec["kafka"]["extra"] = {"sasl.password": {"valueFrom": {"secretKeyRef": {"name": "kafka-auth", "key": "password"}}}}
    spec["sinks"]["kafka"]["results"]["extra"] = {"sasl.password": {"valueFrom": {"secretKeyRef": {"name": "sink-auth", "key": "password"}}}}
    create_pipeline(api, ns, "search", spec)
    first = wait_for(lambda: (d := get(api, "apps/v1", "Deployment", ns, "search")) and secrets_hash(d) and d, 60, "a Deployment with a secrets hash")
    (container,) = first["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("valueFrom") for e in container["env"]}
    assert env["KNARR_KAFKA__EXTRA__sasl.password"] == {"secretKeyRef": {"name": "kafka-auth", "key": "password"}}
    assert env["KNARR_SINKS__KAFKA__results__EXTRA__sasl.password"] == {"secretKeyRef": {"name": "sink-auth", "key": "password"}}
    config = get(api, "v1", "ConfigMap", ns, "search-config")["data"]["config.yaml"]
    assert "password" not in config

    secrets.patch(name="kafka-auth", namespace=ns, body={"stringData": {"password": "second-password"}},
                  content_type="application/merge-patch+json")
    rolled = wait_for(
        lambda: (d := get(api, "apps/v1", "Deployment", ns, "search")) and secrets_hash(d) != secrets_hash(first) and d,
        30, "a new secrets hash on the pod template",
    )
    assert rolled["metadata"]["generation"] > first["metadata"]["generation"]
    assert "second-password" not in json.dumps(rolled) and "first-password" not in json.dumps(rolled)


def test_a_secret_written_inline_becomes_a_config_rejected_condition_without_its_value(api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic)
    spec["kafka"]["extra"] = {"sasl.password": "inline-password"}
    create_pipeline(api, ns, "search", spec)
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "Ready").get("reason") == "ConfigRejected" and b, 30, "ConfigRejected")
    message = condition(body, "Ready")["message"]
    assert "kafka.extra.sasl.password" in message and "put it in a Secret" in message
    assert "inline-password" not in message
    assert get(api, "v1", "ConfigMap", ns, "search-config") is None


def test_a_config_the_worker_rejects_becomes_a_config_rejected_condition(api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic)
    spec["kafka"].update(heartbeatIntervalMs=50_000, sessionTimeoutMs=45_000)
    create_pipeline(api, ns, "search", spec)
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "Ready").get("reason") == "ConfigRejected" and b, 30, "ConfigRejected")
    assert "heartbeat_interval_ms" in condition(body, "Ready")["message"]
    assert get(api, "apps/v1", "Deployment", ns, "search") is None


def test_deleting_a_pipeline_garbage_collects_its_children(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    wait_for(lambda: all(children(api, ns, "search").values()), 60, "children")
    api.resources.get(api_version="knarr.dev/v1alpha1", kind="Pipeline").delete(name="search", namespace=ns)
    wait_for(lambda: not any(children(api, ns, "search").values()), 90, "children garbage-collected")


def test_lag_scales_workers_up_at_once_and_down_after_the_delay(api, operator, ns, kafka_bootstrap, topic):
    group = f"{topic}-group"
    produce_json(kafka_bootstrap, topic, [{"i": i} for i in range(400)], partition=0)
    produce_json(kafka_bootstrap, topic, [{"i": i} for i in range(400)], partition=1)
    commit(kafka_bootstrap, group, topic, {0: 0, 1: 0, 2: 0, 3: 0})
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic, minReplicas=1, maxReplicas=3, lagPerReplica=100, scaleDownDelaySeconds=2))
    wait_for(lambda: (get(api, "apps/v1", "Deployment", ns, "search") or {}).get("spec", {}).get("replicas") == 3, 60, "scale up to maxReplicas")
    assert wait_for(lambda: pipeline(api, ns, "search").get("status", {}).get("lag") == 800, 30, "status.lag")
    commit(kafka_bootstrap, group, topic, {0: 400, 1: 400})
    wait_for(lambda: get(api, "apps/v1", "Deployment", ns, "search")["spec"]["replicas"] == 1, 60, "scale down to minReplicas")
    body = pipeline(api, ns, "search")
    assert body["status"]["partitions"] == 4


def test_pods_of_one_process_per_cpu_count_their_cpu_limit_as_consumers_when_scaling(api, operator, ns,
                                                                                      kafka_bootstrap, topic):
    group = f"{topic}-group"
    produce_json(kafka_bootstrap, topic, [{"i": i} for i in range(400)], partition=0)
    produce_json(kafka_bootstrap, topic, [{"i": i} for i in range(400)], partition=1)
    commit(kafka_bootstrap, group, topic, {0: 0, 1: 0, 2: 0, 3: 0})
    spec = spec_for(kafka_bootstrap, topic, minReplicas=1, maxReplicas=4, lagPerReplica=100, scaleDownDelaySeconds=300)
    spec["processes"] = 0
    spec["resources"] = {"limits": {"cpu": "1500m"}}  # each pod runs two worker processes: two consumers
    create_pipeline(api, ns, "search", spec)
    wait_for(lambda: pipeline(api, ns, "search").get("status", {}).get("lag") == 800, 60, "status.lag")
    wait_for(lambda: (get(api, "apps/v1", "Deployment", ns, "search") or {}).get("spec", {}).get("replicas") == 2, 60,
             "scaled to the 4 partitions / 2 consumers a pod")
    time.sleep(3)  # a few more reconciles: it stays there, under the lag's 8 and maxReplicas' 4
    assert get(api, "apps/v1", "Deployment", ns, "search")["spec"]["replicas"] == 2


def test_with_keda_a_scaled_object_is_rendered_and_replicas_left_to_it(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic, engine="keda"))
    scaled = wait_for(lambda: get(api, "keda.sh/v1alpha1", "ScaledObject", ns, "search"), 60, "ScaledObject")
    assert scaled["spec"]["triggers"][0]["metadata"]["topic"] == topic
    patch_pipeline(api, ns, "search", {"scaling": {"engine": "builtin"}})
    wait_for(lambda: get(api, "keda.sh/v1alpha1", "ScaledObject", ns, "search") is None, 60, "ScaledObject removed")


def test_with_keda_pods_of_two_processes_stop_at_half_the_partitions_once_the_operator_has_seen_them(
        api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic, engine="keda", minReplicas=1, maxReplicas=10)
    spec["processes"] = 2  # two consumers a pod: KEDA alone would go to one pod per partition
    create_pipeline(api, ns, "search", spec)
    wait_for(lambda: (get(api, "keda.sh/v1alpha1", "ScaledObject", ns, "search") or {}).get("spec", {})
             .get("maxReplicaCount") == 2, 60, "KEDA's range capped at the 4 partitions / 2 consumers a pod")
    assert pipeline(api, ns, "search")["status"]["partitions"] == 4
    assert get(api, "keda.sh/v1alpha1", "ScaledObject", ns, "search")["spec"]["minReplicaCount"] == 1


def test_backfills_become_spark_applications_whose_state_is_mirrored_and_not_rerun(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    name = "search-replay-2026-11-01"
    app = wait_for(lambda: get(api, "sparkoperator.k8s.io/v1beta2", "SparkApplication", ns, name), 60, "SparkApplication")
    assert app["spec"]["mainApplicationFile"] == "local:///opt/knarr/spark_entry.py"
    assert app["spec"]["arguments"][:4] == ["--config", "/etc/knarr/config.yaml", "--handler", "search.handler:SearchHandler"]
    set_spark_state(api, ns, name, "RUNNING")
    wait_for(lambda: pipeline(api, ns, "search").get("status", {}).get("backfills", [{}])[0].get("phase") == "RUNNING", 30, "RUNNING mirrored")
    set_spark_state(api, ns, name, "COMPLETED")
    wait_for(lambda: pipeline(api, ns, "search")["status"]["backfills"][0].get("finished"), 30, "COMPLETED recorded")
    api.resources.get(api_version="sparkoperator.k8s.io/v1beta2", kind="SparkApplication").delete(name=name, namespace=ns)
    # A sync after the deletion is proven by the lag it reports for new messages.
    produce_json(kafka_bootstrap, topic, [{"i": 1}, {"i": 2}], partition=0)
    wait_for(lambda: pipeline(api, ns, "search")["status"].get("lag") == 2, 30, "a sync after the deletion")
    assert get(api, "sparkoperator.k8s.io/v1beta2", "SparkApplication", ns, name) is None
    assert pipeline(api, ns, "search")["status"]["backfills"][0]["phase"] == "COMPLETED"


def test_removing_a_backfill_entry_deletes_its_spark_application(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    name = "search-replay-2026-11-01"
    wait_for(lambda: get(api, "sparkoperator.k8s.io/v1beta2", "SparkApplication", ns, name), 60, "SparkApplication")
    patch_pipeline(api, ns, "search", {"backfills": []})
    wait_for(lambda: get(api, "sparkoperator.k8s.io/v1beta2", "SparkApplication", ns, name) is None, 60, "SparkApplication deleted")


def test_restarting_the_operator_creates_no_duplicates_and_writes_nothing(api, kubeconfig, kafka_bootstrap, topic):
    # Its own namespace pattern, so the shared operator does not touch it.
    with namespace(api, f"knarr-restart-{secrets.token_hex(4)}") as ns:
        with running_operator(kubeconfig, "knarr-restart-*"):
            create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
            wait_for(lambda: all(children(api, ns, "search").values()), 60, "children")
            wait_for(lambda: get(api, "sparkoperator.k8s.io/v1beta2", "SparkApplication", ns, "search-replay-2026-11-01"), 60, "backfill")
            wait_for(lambda: pipeline(api, ns, "search").get("status", {}).get("lag") == 0, 30, "status")
        before = {k: v["metadata"]["resourceVersion"] for k, v in children(api, ns, "search").items()}
        with running_operator(kubeconfig, "knarr-restart-*"):
            produce_json(kafka_bootstrap, topic, [{"i": 1}], partition=0)
            wait_for(lambda: pipeline(api, ns, "search")["status"].get("lag") == 1, 30, "the restarted operator's first syncs")
            after = {k: v["metadata"]["resourceVersion"] for k, v in children(api, ns, "search").items()}
            deployments = apps(api).list_namespaced_deployment(ns).items
            spark = api.resources.get(api_version="sparkoperator.k8s.io/v1beta2", kind="SparkApplication").get(namespace=ns).items
            # Delete while an operator runs: kopf's finalizer (for the resync timer) needs it.
            api.resources.get(api_version="knarr.dev/v1alpha1", kind="Pipeline").delete(name="search", namespace=ns)
            wait_for(lambda: not api.resources.get(api_version="knarr.dev/v1alpha1", kind="Pipeline").get(namespace=ns).items, 30, "Pipeline deleted")
        assert after == before
        assert (len(deployments), len(spark)) == (1, 1)
