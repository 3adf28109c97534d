"""On the real kube-apiserver: the debug port and Service come with spec.debug.enabled and go with it;
spec.debugVolume puts a shared claim at the recorder's directory, or the Pipeline is rejected saying why."""

from __future__ import annotations

import pytest
from kubernetes.dynamic.exceptions import UnprocessibleEntityError

from tests.operator.cluster_helpers import condition, create_pipeline, get, patch_pipeline, pipeline, wait_for
from tests.operator.test_operator_k8s import spec_for
from tests.operator.test_operator_k8s_integrations import secret

pytestmark = [pytest.mark.k8s, pytest.mark.kafka]

OPERATED = "knarr-debug-"  # namespaces this module's operator watches
OPERATOR_SETTINGS = {"KNARR_OPERATOR_ALLOW_DEBUG": "true"}  # its chart allows debug (operator.allowDebug)


def ports(api, ns: str) -> list[str]:
    deployment = get(api, "apps/v1", "Deployment", ns, "search") or {}
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [{}])
    return [p["name"] for p in containers[0].get("ports", [])]


def test_turning_debug_on_adds_the_port_and_service_and_turning_it_off_removes_both(api, operator, ns, kafka_bootstrap, topic):
    secret(api, ns, "debug", {"token": "s3cret"})
    spec = spec_for(kafka_bootstrap, topic)
    create_pipeline(api, ns, "search", spec)
    wait_for(lambda: ports(api, ns) == ["metrics"], 60, "the workers without a debug port")
    assert get(api, "v1", "Service", ns, "search-debug") is None

    patch_pipeline(api, ns, "search", {"debug": {"enabled": True, "host": "0.0.0.0", "port": 8088,
                                                 "token": {"valueFrom": {"secretKeyRef": {"name": "debug", "key": "token"}}}}})
    wait_for(lambda: ports(api, ns) == ["metrics", "debug"], 60, "the debug port on the workers")
    service = wait_for(lambda: get(api, "v1", "Service", ns, "search-debug"), 60, "the debug Service")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("debug", 8088, "debug")]
    container = get(api, "apps/v1", "Deployment", ns, "search")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "KNARR_DEBUG__TOKEN", "valueFrom": {"secretKeyRef": {"name": "debug", "key": "token"}}} in [
        {k: v for k, v in e.items() if v is not None} for e in container["env"]]
    assert "s3cret" not in str(get(api, "v1", "ConfigMap", ns, "search-config"))

    patch_pipeline(api, ns, "search", {"debug": {"enabled": False}})
    wait_for(lambda: ports(api, ns) == ["metrics"], 60, "the debug port gone from the workers")
    wait_for(lambda: get(api, "v1", "Service", ns, "search-debug") is None, 60, "the debug Service deleted")


def worker_pod(api, ns: str) -> dict:
    return ((get(api, "apps/v1", "Deployment", ns, "search") or {}).get("spec", {}).get("template", {}).get("spec", {}))


def debug_volume(api, ns: str) -> tuple[dict | None, dict | None]:
    """The recorder's volume on the workers and where it is mounted (None, None without one)."""
    pod = worker_pod(api, ns)
    volume = next(({k: v for k, v in v.items() if v is not None} for v in pod.get("volumes") or []
                   if v["name"].startswith("debug-")), None)
    containers = pod.get("containers") or [{}]
    mount = next(({"name": m["name"], "mountPath": m["mountPath"]} for m in containers[0].get("volumeMounts") or []
                  if m["name"].startswith("debug-")), None)
    return volume, mount


def rejected(api, ns: str, says: str) -> str:
    body = wait_for(lambda: (b := pipeline(api, ns, "search")) and condition(b, "Ready").get("reason") == "ConfigRejected"
                    and says in condition(b, "Ready")["message"] and b, 60, f"ConfigRejected saying {says!r}")
    return condition(body, "Ready")["message"]


def test_a_shared_debug_volume_is_mounted_at_the_recorders_directory_and_an_emptydir_without_it(api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic)
    spec["debug"] = {"enabled": True, "dbDir": "/var/lib/knarr/debug"}
    spec["debugVolume"] = {"claimName": "search-recorder"}
    create_pipeline(api, ns, "search", spec)

    volume, mount = wait_for(lambda: (parts := debug_volume(api, ns))[0] and parts, 60, "the recorder's volume")
    assert volume == {"name": "debug-shared", "persistentVolumeClaim": {"claimName": "search-recorder"}}
    assert mount == {"name": "debug-shared", "mountPath": "/var/lib/knarr/debug"}
    env = worker_pod(api, ns)["containers"][0]["env"]
    assert {"name": "WORKER_ID", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}} in [
        {k: v for k, v in e.items() if v is not None} for e in env]  # one name per pod: files of its own

    patch_pipeline(api, ns, "search", {"debugVolume": None})
    wait_for(lambda: debug_volume(api, ns) == ({"name": "debug-db", "emptyDir": {}},
                                              {"name": "debug-db", "mountPath": "/var/lib/knarr/debug"}), 60,
             "each pod's own emptyDir again, the claim gone")
    volumes = [v["name"] for v in worker_pod(api, ns)["volumes"]]
    assert "debug-shared" not in volumes and volumes.count("debug-db") == 1


def test_a_shared_debug_volume_the_recorder_would_not_write_to_is_rejected_and_the_workers_stay(api, operator, ns, kafka_bootstrap, topic):
    create_pipeline(api, ns, "search", spec_for(kafka_bootstrap, topic))
    before = wait_for(lambda: get(api, "apps/v1", "Deployment", ns, "search"), 60, "the workers")

    patch_pipeline(api, ns, "search", {"debugVolume": {"claimName": "search-recorder"}})
    message = rejected(api, ns, "spec.debug.enabled is false")
    assert "spec.debugVolume (claim 'search-recorder')" in message and "remove spec.debugVolume" in message

    patch_pipeline(api, ns, "search", {"debug": {"enabled": True, "dbDir": ""}})
    assert "set spec.debug.dbDir to a directory" in rejected(api, ns, "spec.debug.dbDir is ''")
    patch_pipeline(api, ns, "search", {"debug": {"dbDir": "/tmp"}})
    assert "a directory of its own" in rejected(api, ns, "the pod's own scratch directory")
    after = get(api, "apps/v1", "Deployment", ns, "search")
    assert after["metadata"]["generation"] == before["metadata"]["generation"], "the old workers keep running"
    assert debug_volume(api, ns) == (None, None)

    patch_pipeline(api, ns, "search", {"debug": {"dbDir": "/var/lib/knarr/debug"}})
    wait_for(lambda: debug_volume(api, ns)[0] == {"name": "debug-shared", "persistentVolumeClaim": {"claimName": "search-recorder"}},
             60, "the shared volume once the recorder writes to a directory of its own")


def test_the_api_server_refuses_a_claim_name_that_is_no_kubernetes_name(api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic)
    spec["debug"] = {"enabled": True, "dbDir": "/var/lib/knarr/debug"}
    spec["debugVolume"] = {"claimName": "Search_Recorder"}
    with pytest.raises(UnprocessibleEntityError) as err:
        create_pipeline(api, ns, "search", spec)
    assert "spec.debugVolume.claimName" in str(err.value.body)
