"""On the real kube-apiserver: the debug port and Service come with spec.debug.enabled and go with it."""

from __future__ import annotations

import pytest

from tests.operator.cluster_helpers import create_pipeline, get, patch_pipeline, wait_for
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
