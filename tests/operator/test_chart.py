"""The Helm chart lints, renders, and its output is accepted by the real API server (server-side dry run)."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import pytest
import yaml

from knarr_operator.settings import OperatorSettings, env_name

from tests.operator.cluster_helpers import dynamic, install_crds, namespace
from tests.services.envtest import helm_bin

CHART = Path(__file__).resolve().parents[2] / "charts" / "knarr-operator"

pytestmark = pytest.mark.k8s


def helm(*args: str) -> str:
    proc = subprocess.run([helm_bin(), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_the_chart_passes_helm_lint():
    helm("lint", "--strict", str(CHART))


def test_the_rendered_chart_is_accepted_by_the_api_server(kubeconfig):
    api = dynamic(kubeconfig)
    install_crds(api)
    with namespace(api, f"knarr-chart-{secrets.token_hex(4)}") as ns:
        rendered = helm("template", "knarr", str(CHART), "--namespace", ns, "--include-crds", "--kubeconfig", kubeconfig)
        docs = [d for d in yaml.safe_load_all(rendered) if d]
        kinds = sorted(d["kind"] for d in docs)
        assert kinds == ["ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Deployment", "ServiceAccount"]
        for doc in docs:
            resource = api.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            kwargs = {"namespace": ns} if resource.namespaced else {}
            api.server_side_apply(resource, body=doc, field_manager="knarr-tests", dry_run="All", force_conflicts=True, **kwargs)


def test_rbac_grants_only_what_the_operator_uses():
    rendered = helm("template", "knarr", str(CHART))
    (role,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ClusterRole"]
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert "*" not in {v for verbs in granted.values() for v in verbs}
    assert granted[("knarr.dev", "pipelines/status")] == {"get", "patch"}
    assert "delete" not in granted[("apps", "deployments")]  # children go by garbage collection
    assert granted[("", "events")] == {"create"}
    assert granted[("", "secrets")] == {"get"}  # to hash the referenced ones; never listed or watched
    assert granted[("", "pods")] == {"list"}  # the workers' termination messages, by label selector


def test_every_operator_value_reaches_the_operator_as_its_setting():
    rendered = helm("template", "knarr", str(CHART), "--set", "operator.resyncSeconds=7", "--set", "operator.logLevel=verbose")
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert set(env) == {env_name(name) for name in OperatorSettings.model_fields}
    assert OperatorSettings.from_env(env) == OperatorSettings(resync_seconds=7, log_level="verbose")


def test_the_operator_may_manage_keda_trigger_authentications():
    rendered = helm("template", "knarr", str(CHART))
    (role,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ClusterRole"]
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted[("keda.sh", "triggerauthentications")] == granted[("keda.sh", "scaledobjects")] == {"get", "list", "watch", "create", "patch", "delete"}


def test_access_to_secrets_can_be_left_out():
    rendered = helm("template", "knarr", str(CHART), "--set", "rbac.readSecrets=false")
    (role,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ClusterRole"]
    assert not [rule for rule in role["rules"] if "secrets" in rule["resources"]]
