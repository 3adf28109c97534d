"""Fixtures of the operator tests: a sample Pipeline spec, and the shared services.

The real kube-apiserver and Kafka come from tests/services (envtest.py, kafka.py).
"""

from __future__ import annotations

import copy
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # tests/services is imported as a package from the repo root
    sys.path.insert(0, str(REPO_ROOT))

from tests.services.envtest import kubeconfig  # noqa: E402,F401  (session fixture)
from tests.operator.cluster_helpers import dynamic, install_crds, namespace, operator_process, wait_for  # noqa: E402
from tests.services.kafka import create_topic, kafka_bootstrap, unique_name  # noqa: E402,F401  (session fixture)

SAMPLE_SPEC: dict[str, Any] = {
    "image": "registry.example/search-handler:1.2.0",
    "handler": "search.handler:SearchHandler",
    "kafka": {"brokers": "kafka:9092", "sourceTopic": "search-requests", "consumerGroup": "search"},
    "executor": {"binaryPath": "/usr/local/bin/rg", "maxExecutors": 8, "taskTimeoutSeconds": 120, "windowSize": 20, "maxRetries": 3},
    "sinks": {
        "kafka": {"results": {"topic": "search-results"}},
        "filesystem": {"logs": {"basePath": "/data"}},
        "postgres": {"main": {"dsn": {"valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}}},
    },
    "dlq": {"topic": ""},
    "scaling": {"minReplicas": 1, "maxReplicas": 12, "lagPerReplica": 1000, "scaleDownDelaySeconds": 300, "engine": "builtin"},
    "resources": {"requests": {"cpu": "2", "memory": "2Gi"}},
    "env": [{"name": "LOG_EXTRA", "value": "1"}],
    "backfills": [
        {
            "name": "replay-2026-11-01",
            "from": {"timestamp": "2026-11-01T00:00:00Z"},
            "to": {"timestamp": "2026-11-02T00:00:00Z"},
            "spark": {"executors": 4, "executorCores": 2, "executorMemory": "4g"},
        }
    ],
}


@pytest.fixture(scope="module")
def api(kubeconfig):
    """A dynamic client on the envtest API server, with knarr's CRDs (and the test fixtures' KEDA/Spark CRDs) installed."""
    dyn = dynamic(kubeconfig)
    install_crds(dyn)
    return dyn


@pytest.fixture(scope="module")
def operator(request, api, kubeconfig, tmp_path_factory):
    """The operator as users run it (its own ``knarr-operator`` process), watching the module's ``OPERATED`` prefix.

    A module sets ``OPERATOR_RESYNC_SECONDS`` to have it resync more often (deadline tests) or less, and
    ``OPERATOR_SETTINGS`` for more of its ``KNARR_OPERATOR_*`` variables.
    """
    resync = getattr(request.module, "OPERATOR_RESYNC_SECONDS", 1)
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with operator_process(kubeconfig, f"{request.module.OPERATED}*", log, resync_seconds=resync,
                          settings=getattr(request.module, "OPERATOR_SETTINGS", None)) as proc:
        yield proc


@pytest.fixture
def sample_spec() -> dict[str, Any]:
    return copy.deepcopy(SAMPLE_SPEC)


@pytest.fixture
def ns(request, api, operator):
    """A fresh namespace matching the module's ``OPERATED`` prefix, so the module's operator watches it."""
    with namespace(api, f"{request.module.OPERATED}{secrets.token_hex(4)}") as name:
        yield name
        # Pipelines go first, while the operator still watches the namespace: kopf's
        # finalizer (it has one for the resync timer) is removed only by a running operator.
        pipelines = api.resources.get(api_version="knarr.dev/v1alpha1", kind="Pipeline")
        for item in pipelines.get(namespace=name).items:
            pipelines.delete(name=item.metadata.name, namespace=name)
        try:
            wait_for(lambda: not pipelines.get(namespace=name).items, 30, "Pipelines deleted")
        except AssertionError:
            # Cleanup only (deletion itself is tested): never leave a namespace stuck.
            for item in pipelines.get(namespace=name).items:
                pipelines.patch(name=item.metadata.name, namespace=name, body={"metadata": {"finalizers": None}},
                                content_type="application/merge-patch+json")


@pytest.fixture
def topic(request, kafka_bootstrap):
    """A fresh 4-partition source topic named after the module's prefix."""
    name = unique_name(request.module.OPERATED.rstrip("-"))
    create_topic(kafka_bootstrap, name, partitions=4)
    return name
