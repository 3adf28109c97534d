"""The envtest control plane really behaves like a Kubernetes cluster.

Needs the ``kubeconfig`` fixture from ``tests.services.envtest`` (registered in
tests/conftest.py). Every test works in its own namespace.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.services.envtest import hadolint_bin, helm_bin, tools

pytestmark = pytest.mark.k8s

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def gone(read: Callable[[], object]) -> bool:
    """True once ``read`` answers 404."""
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


@pytest.fixture(scope="module")
def api(kubeconfig: str) -> Iterator[client.ApiClient]:
    with config.new_client_from_config(config_file=kubeconfig) as api_client:
        yield api_client


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    name = f"envtest-{secrets.token_hex(4)}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    # The namespace controller (in the controller-manager) finishes this
    # asynchronously; nothing waits for it.
    core.delete_namespace(name)


def make_deployment(api: client.ApiClient, namespace: str, name: str) -> client.V1Deployment:
    labels = {"app": name}
    body = client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="main", image="busybox:1.36")]
                ),
            ),
        ),
    )
    return client.AppsV1Api(api).create_namespaced_deployment(namespace, body)


def owned_replicasets(
    api: client.ApiClient, namespace: str, owner_uid: str
) -> list[client.V1ReplicaSet]:
    rs_list = client.AppsV1Api(api).list_namespaced_replica_set(namespace)
    return [
        rs
        for rs in rs_list.items
        if any(ref.uid == owner_uid for ref in rs.metadata.owner_references or [])
    ]


def test_apiserver_answers(api: client.ApiClient) -> None:
    version = client.VersionApi(api).get_code()
    assert version.git_version == tools()["KUBE_VERSION"]
    names = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_deployment_gets_replicaset_and_pods(api: client.ApiClient, namespace: str) -> None:
    dep = make_deployment(api, namespace, "web")
    rs = wait_for(
        "the deployment controller to create a ReplicaSet",
        lambda: owned_replicasets(api, namespace, dep.metadata.uid),
    )
    assert len(rs) == 1 and rs[0].spec.replicas == 2
    # The replicaset controller creates the Pods (they stay Pending: no nodes).
    core = client.CoreV1Api(api)

    def rs_pods() -> list[client.V1Pod] | None:
        pods = [
            p
            for p in core.list_namespaced_pod(namespace, label_selector="app=web").items
            if any(ref.uid == rs[0].metadata.uid for ref in p.metadata.owner_references or [])
        ]
        return pods if len(pods) == 2 else None

    pods = wait_for("the replicaset controller to create 2 Pods", rs_pods)
    assert all(p.status.phase == "Pending" for p in pods)


@pytest.mark.parametrize("propagation", ["Foreground", "Background"])
def test_owner_deletion_garbage_collects_dependents(
    api: client.ApiClient, namespace: str, propagation: str
) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    dep = make_deployment(api, namespace, "owner")
    owner_ref = client.V1OwnerReference(
        api_version="apps/v1",
        kind="Deployment",
        name=dep.metadata.name,
        uid=dep.metadata.uid,
        block_owner_deletion=True,
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="owned", owner_references=[owner_ref]),
            data={"k": "v"},
        ),
    )
    wait_for("a ReplicaSet", lambda: owned_replicasets(api, namespace, dep.metadata.uid))

    apps.delete_namespaced_deployment(
        "owner", namespace, body=client.V1DeleteOptions(propagation_policy=propagation)
    )

    wait_for(
        f"the garbage collector to delete the ConfigMap ({propagation})",
        lambda: gone(lambda: core.read_namespaced_config_map("owned", namespace)),
    )
    wait_for(
        f"the Deployment to be gone ({propagation})",
        lambda: gone(lambda: apps.read_namespaced_deployment("owner", namespace)),
    )
    wait_for(
        f"the ReplicaSet to be garbage collected ({propagation})",
        lambda: not owned_replicasets(api, namespace, dep.metadata.uid),
    )


def test_server_side_dry_run_persists_nothing(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dry"), data={"a": "b"})
    created = core.create_namespaced_config_map(namespace, body, dry_run="All")
    assert created.metadata.name == "dry" and created.metadata.uid  # defaulted by the server
    assert gone(lambda: core.read_namespaced_config_map("dry", namespace))
    # Admission runs on dry-run too: NamespaceLifecycle rejects a missing namespace.
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("no-such-namespace", body, dry_run="All")
    assert err.value.status == 404


def test_rbac_is_enforced(api: client.ApiClient, kubeconfig: str, namespace: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    # The admin (system:masters) may impersonate; a fresh ServiceAccount has
    # no bindings, so RBAC must deny it ...
    with config.new_client_from_config(config_file=kubeconfig) as as_sa:
        as_sa.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:reader")
        sa_core = client.CoreV1Api(as_sa)
        with pytest.raises(ApiException) as err:
            sa_core.list_namespaced_config_map(namespace)
        assert err.value.status == 403 and "cannot list resource" in err.value.body

        # ... until a RoleBinding to the built-in "view" ClusterRole allows it.
        client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="reader-view"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="view"
                ),
                subjects=[
                    client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)
                ],
            ),
        )

        # RBAC changes propagate through the authorizer's informer cache.
        def can_list() -> bool:
            try:
                sa_core.list_namespaced_config_map(namespace)
            except ApiException as exc:
                if exc.status == 403:
                    return False
                raise
            return True

        wait_for("the RoleBinding to take effect", can_list, timeout=30)


def test_helm_installs_chart_with_rbac(
    api: client.ApiClient, kubeconfig: str, namespace: str, tmp_path
) -> None:
    chart = tmp_path / "demo"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 0.1.0\n")
    (chart / "templates" / "all.yaml").write_text(
        """\
apiVersion: v1
kind: ServiceAccount
metadata: {name: demo}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: demo}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: demo}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: demo}
subjects:
- {kind: ServiceAccount, name: demo, namespace: {{ .Release.Namespace }}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: demo}
data:
  kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}
"""
    )
    proc = subprocess.run(
        [
            helm_bin(),
            "install",
            "demo",
            str(chart),
            "--namespace",
            namespace,
            "--kubeconfig",
            kubeconfig,
            "--wait",
            "--timeout",
            "60s",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rbac = client.RbacAuthorizationV1Api(api)
    assert rbac.read_namespaced_role("demo", namespace).rules[0].resources == ["configmaps"]
    assert rbac.read_namespaced_role_binding("demo", namespace).subjects[0].name == "demo"
    cm = client.CoreV1Api(api).read_namespaced_config_map("demo", namespace)
    # helm rendered against the live cluster's version, not its built-in default.
    assert cm.data["kubeVersion"] == tools()["KUBE_VERSION"]


def test_helm_version_runs() -> None:
    out = subprocess.run(
        [helm_bin(), "version", "--short"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith(tools()["HELM_VERSION"]), out


def test_hadolint_flags_untagged_image(tmp_path) -> None:
    hadolint = hadolint_bin()
    if hadolint is None:
        pytest.fail("hadolint is not available; hack/envtest/build.sh could not fetch it")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu\nRUN echo hi\n")
    proc = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)], check=False, capture_output=True, text=True
    )
    assert proc.returncode != 0 and "DL3006" in proc.stdout, proc.stdout + proc.stderr
