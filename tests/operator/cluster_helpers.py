"""Helpers of the operator tests against the real API server: CRDs, namespaces, the operator, polling."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from knarr_operator.crd import crd_paths, repo_root

FIXTURES = Path(__file__).parent / "fixtures"
# The real CRDs of KEDA and the Spark operator (fixtures/README.md names the versions): the API
# server validates and prunes what the operator writes as a cluster running them would.
VENDORED_CRDS = ("keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml", "sparkoperator.k8s.io_sparkapplications.yaml")
SPARK = ("sparkoperator.k8s.io/v1beta2", "SparkApplication")
T = TypeVar("T")


def wait_for(probe: Callable[[], T], timeout: float = 60, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except NotFoundError as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")


def dynamic(kubeconfig: str) -> DynamicClient:
    return DynamicClient(config.new_client_from_config(config_file=kubeconfig))


def install_crds(api: DynamicClient) -> None:
    crds = api.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    paths = [crd_paths(repo_root())[0], *(FIXTURES / name for name in VENDORED_CRDS)]
    for path in paths:
        body = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        api.server_side_apply(crds, body=body, field_manager="knarr-tests", force_conflicts=True)
        name = body["metadata"]["name"]

        def established(name: str = name) -> bool:
            conds = crds.get(name=name).to_dict().get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        wait_for(established, 30, f"CRD {name} established")
    api.resources.invalidate_cache()
    wait_for(lambda: _discoverable(api), 30, "CRDs in discovery")


def _discoverable(api: DynamicClient) -> bool:
    try:
        for av, kind in (("knarr.dev/v1alpha1", "Pipeline"), SPARK, ("keda.sh/v1alpha1", "ScaledObject"), ("keda.sh/v1alpha1", "TriggerAuthentication")):
            api.resources.get(api_version=av, kind=kind)
        return True
    except Exception:
        api.resources.invalidate_cache()
        return False


@contextlib.contextmanager
def namespace(api: DynamicClient, name: str) -> Iterator[str]:
    ns = api.resources.get(api_version="v1", kind="Namespace")
    ns.create(body={"metadata": {"name": name}})
    try:
        yield name
    finally:
        ns.delete(name=name)


@contextlib.contextmanager
def running_operator(kubeconfig: str, namespace_pattern: str) -> Iterator[Any]:
    """The real operator (kopf's own test runner), watching namespaces that match the pattern."""
    os.environ["KUBECONFIG"] = kubeconfig  # the operator reads it at call time
    from kopf.testing import KopfRunner

    import knarr_operator.handlers as handlers

    # Its settings (the resync interval: 15 s unless KNARR_OPERATOR_RESYNC_SECONDS says otherwise) were
    # read when this process first imported the module; events, not the timer, drive most tests.
    handlers._cluster = None  # noqa: SLF001  pick up this kubeconfig
    args = ["run", "--standalone", "--namespace", namespace_pattern, "-m", "knarr_operator.handlers", "--verbose"]
    with KopfRunner(args, timeout=60) as runner:
        yield runner
    (repo_root() / ".cache" / "operator-test.log").write_text(runner.output)
    assert runner.exit_code == 0, runner.output
    assert runner.exception is None, runner.output


@contextlib.contextmanager
def operator_process(kubeconfig: str, namespace_pattern: str, log: Path, resync_seconds: float = 1,
                     settings: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """The operator as users run it: its own process (``knarr-operator``), resyncing every ``resync_seconds``;
    ``settings`` are more of its ``KNARR_OPERATOR_*`` variables."""
    env = {**os.environ, "KUBECONFIG": kubeconfig, "KNARR_OPERATOR_RESYNC_SECONDS": str(resync_seconds), **(settings or {})}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "knarr_operator", "--namespace", namespace_pattern],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.returncode not in (0, -15):
            print(log.read_text()[-4000:])


def get(api: DynamicClient, api_version: str, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return api.resources.get(api_version=api_version, kind=kind).get(name=name, namespace=ns).to_dict()
    except NotFoundError:
        return None


def set_spark_state(api: DynamicClient, ns: str, name: str, state: str) -> None:
    """Write a SparkApplication's state through its status subresource, as the Spark operator's controller does
    (its CRD requires driverInfo, which the controller fills in once it has submitted the driver)."""
    status = {"applicationState": {"state": state}, "driverInfo": {"podName": f"{name}-driver"}}
    api.resources.get(api_version=SPARK[0], kind=SPARK[1]).status.patch(
        name=name, namespace=ns, body={"status": status}, content_type="application/merge-patch+json")


def pipeline(api: DynamicClient, ns: str, name: str) -> dict[str, Any]:
    return api.resources.get(api_version="knarr.dev/v1alpha1", kind="Pipeline").get(name=name, namespace=ns).to_dict()


def create_pipeline(api: DynamicClient, ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    res = api.resources.get(api_version="knarr.dev/v1alpha1", kind="Pipeline")
    return res.create(body={"apiVersion": "knarr.dev/v1alpha1", "kind": "Pipeline", "metadata": {"name": name}, "spec": spec}, namespace=ns).to_dict()


def patch_pipeline(api: DynamicClient, ns: str, name: str, spec_patch: dict[str, Any]) -> None:
    res = api.resources.get(api_version="knarr.dev/v1alpha1", kind="Pipeline")
    res.patch(name=name, namespace=ns, body={"spec": spec_patch}, content_type="application/merge-patch+json")


def condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def apps(api: DynamicClient) -> client.AppsV1Api:
    return client.AppsV1Api(api.client)
