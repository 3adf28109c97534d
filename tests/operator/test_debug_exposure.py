"""The debug UI on Kubernetes: exposed only when a Pipeline turns it on, its token only from a Secret."""

from __future__ import annotations

import pytest

from knarr_operator.manifests import PipelineRef, render_children
from knarr_operator.preflight import check_debug_volume, preflight
from knarr_operator.spec import split_spec
from knarr_operator.worker_config import InvalidConfig, render_worker_config

PIPELINE = PipelineRef(name="search", namespace="team-a", uid="uid-1")
TOKEN = {"valueFrom": {"secretKeyRef": {"name": "debug", "key": "token"}}}


def render(spec):
    operator, worker = split_spec(spec)
    return render_children(PIPELINE, operator, render_worker_config(worker, operator.env), 2)


def worker(children):
    (deployment,) = [m for m in children.workload if m["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]


def services(children):
    return {m["metadata"]["name"]: m for m in children.workload if m["kind"] == "Service"}


def test_without_debug_there_is_no_debug_port_and_the_debug_service_is_to_be_removed(sample_spec):
    children = render(sample_spec)

    (container,) = worker(children)["containers"]
    assert [p["name"] for p in container["ports"]] == ["metrics"]
    assert set(services(children)) == {"search-metrics"}
    assert ("v1", "Service", "search-debug") in children.absent


def test_debug_bound_beyond_loopback_gets_its_port_a_service_and_its_token_from_the_secret(sample_spec):
    sample_spec["debug"] = {"enabled": True, "host": "0.0.0.0", "port": 8088, "token": TOKEN}
    children = render(sample_spec)

    (container,) = worker(children)["containers"]
    assert {"name": "debug", "containerPort": 8088, "protocol": "TCP"} in container["ports"]
    service = services(children)["search-debug"]
    assert service["spec"]["ports"] == [{"name": "debug", "port": 8088, "targetPort": "debug", "protocol": "TCP"}]
    assert service["spec"]["selector"] == {"knarr.dev/pipeline": "search", "app.kubernetes.io/component": "worker"}
    assert {"name": "KNARR_DEBUG__TOKEN", "valueFrom": {"secretKeyRef": {"name": "debug", "key": "token"}}} in container["env"]
    (config_map,) = [m for m in children.workload if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "search-config"]
    assert "token" not in config_map["data"]["config.yaml"]
    assert ("v1", "Service", "search-debug") not in children.absent


def test_debug_on_loopback_gets_its_port_for_port_forward_but_no_service(sample_spec):
    sample_spec["debug"] = {"enabled": True}
    children = render(sample_spec)

    (container,) = worker(children)["containers"]
    assert {"name": "debug", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert "search-debug" not in services(children) and ("v1", "Service", "search-debug") in children.absent


def test_the_recorders_directory_outside_tmp_gets_a_writable_volume(sample_spec):
    sample_spec["debug"] = {"enabled": True, "dbDir": "/var/lib/knarr-debug"}
    pod = worker(render(sample_spec))

    assert {"name": "debug-db", "emptyDir": {}} in pod["volumes"]
    assert {"name": "debug-db", "mountPath": "/var/lib/knarr-debug"} in pod["containers"][0]["volumeMounts"]


def test_a_shared_debug_volume_is_mounted_at_the_recorders_directory_in_place_of_the_emptydir(sample_spec):
    sample_spec["debug"] = {"enabled": True, "dbDir": "/var/lib/knarr-debug/"}
    sample_spec["debugVolume"] = {"claimName": "recorder-rwx"}
    operator, worker_spec = split_spec(sample_spec)
    check_debug_volume(operator, render_worker_config(worker_spec))
    pod = worker(render(sample_spec))

    debug_volumes = [v for v in pod["volumes"] if v["name"].startswith("debug-")]
    assert debug_volumes == [{"name": "debug-shared", "persistentVolumeClaim": {"claimName": "recorder-rwx"}}]
    (container,) = pod["containers"]
    assert [m for m in container["volumeMounts"] if m["name"].startswith("debug-")] == [
        {"name": "debug-shared", "mountPath": "/var/lib/knarr-debug"}]
    # Each pod records under its own name (the pod's), so no two write files of the same name there.
    assert {"name": "WORKER_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]


def test_a_shared_debug_volume_under_tmp_is_mounted_there_beside_the_pods_scratch_tmp(sample_spec):
    sample_spec["debug"] = {"enabled": True, "dbDir": "/tmp/recorder"}
    sample_spec["debugVolume"] = {"claimName": "recorder-rwx"}
    pod = worker(render(sample_spec))

    assert {"name": "debug-shared", "persistentVolumeClaim": {"claimName": "recorder-rwx"}} in pod["volumes"]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
    assert {"name": "debug-shared", "mountPath": "/tmp/recorder"} in pod["containers"][0]["volumeMounts"]


@pytest.mark.parametrize(("debug", "says"), [
    ({"enabled": False, "dbDir": "/var/lib/knarr-debug"}, "spec.debug.enabled is false: set spec.debug.enabled: true, or remove spec.debugVolume"),
    ({"enabled": True, "dbDir": ""}, "spec.debug.dbDir is '' (events kept in memory only): set spec.debug.dbDir to a directory"),
    ({"enabled": True}, "spec.debug.dbDir '/tmp', the pod's own scratch directory"),
    ({"enabled": True, "dbDir": "recorder"}, "'recorder' is a relative path: write an absolute one"),
    ({"enabled": True, "dbDir": "/data/"}, "'/data/', where sinks.filesystem.logs.basePath is mounted already"),
])
def test_a_shared_debug_volume_the_recorder_would_not_write_to_is_refused_saying_what_to_do(sample_spec, debug, says):
    sample_spec["debug"] = debug
    sample_spec["debugVolume"] = {"claimName": "recorder-rwx"}
    operator, worker_spec = split_spec(sample_spec)
    with pytest.raises(InvalidConfig) as err:
        check_debug_volume(operator, render_worker_config(worker_spec))
    assert "spec.debugVolume (claim 'recorder-rwx')" in str(err.value) and says in str(err.value)


def test_without_a_debug_volume_nothing_is_checked_and_no_claim_is_mounted(sample_spec):
    sample_spec["debug"] = {"enabled": False}
    operator, worker_spec = split_spec(sample_spec)
    check_debug_volume(operator, render_worker_config(worker_spec))
    pod = worker(render(sample_spec))
    assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v]


def test_a_token_written_in_the_pipeline_is_refused_it_would_sit_in_the_configmap(sample_spec):
    sample_spec["debug"] = {"enabled": True, "host": "0.0.0.0", "token": "hunter2"}
    with pytest.raises(InvalidConfig) as err:
        render(sample_spec)
    assert "debug.token: is a secret" in str(err.value) and "secretKeyRef" in str(err.value)
    assert "hunter2" not in str(err.value)


def test_debug_reachable_from_other_pods_without_a_token_is_refused_saying_how_to_give_one(sample_spec):
    sample_spec["debug"] = {"enabled": True, "host": "0.0.0.0"}
    with pytest.raises(InvalidConfig) as err:
        render(sample_spec)
    assert "debug.host '0.0.0.0'" in str(err.value) and "spec.debug.token" in str(err.value)
    assert "kubectl port-forward" in str(err.value)


def test_a_pod_of_several_processes_gets_a_debug_port_per_process_none_of_them_the_metrics_port(sample_spec):
    sample_spec["debug"] = {"enabled": True, "port": 8088}
    sample_spec["processes"] = 3
    (container,) = worker(render(sample_spec))["containers"]
    assert [(p["name"], p["containerPort"]) for p in container["ports"] if p["name"].startswith("debug")] == [
        ("debug", 8088), ("debug-1", 8089), ("debug-2", 8090)]
    sample_spec["debug"]["port"] = 9089
    with pytest.raises(InvalidConfig, match=r"debug.port 9089 and processes 3: .*metrics.port \(9090\) is among"):
        render(sample_spec)
    sample_spec["debug"]["port"] = 65534
    with pytest.raises(InvalidConfig, match=r"debug.port 65534 and processes 3: .*past 65535"):
        render(sample_spec)


@pytest.mark.parametrize("port", [0, 9090])
def test_the_debug_port_must_be_fixed_and_not_the_metrics_port(sample_spec, port):
    sample_spec["debug"] = {"enabled": True, "port": port}
    with pytest.raises(InvalidConfig) as err:
        render(sample_spec)
    assert f"debug.port {port}" in str(err.value)


def test_an_operator_that_does_not_allow_debug_refuses_a_pipeline_that_turns_it_on(sample_spec):
    sample_spec["debug"] = {"enabled": True}
    _, worker_spec = split_spec(sample_spec)
    config = render_worker_config(worker_spec)
    with pytest.raises(InvalidConfig) as err:
        preflight(config, allow_debug=False)
    assert "operator.allowDebug" in str(err.value)
    sample_spec["debug"] = {"enabled": False}
    preflight(render_worker_config(split_spec(sample_spec)[1]), allow_debug=False)
