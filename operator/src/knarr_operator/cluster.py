"""The Kubernetes API, as thin as possible: read, apply when different, delete.

"Different" is decided by the API server itself: a server-side-apply dry run
returns the object as it would be after applying (defaults filled in, quantities
normalised), and only if that differs from what is stored is the apply sent.
So a resync, an operator restart or a replayed event writes nothing.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client, config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

FIELD_MANAGER = "knarr-operator"
COMPARED = ("spec", "data")
COMPARED_META = ("labels", "annotations", "ownerReferences")

Outcome = Literal["created", "updated", "unchanged"]
log = logging.getLogger(__name__)


def load_client() -> DynamicClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        # Read $KUBECONFIG now: the client library reads it once, at import time.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    return DynamicClient(client.ApiClient())


@dataclass
class Cluster:
    api: DynamicClient

    def resource(self, api_version: str, kind: str) -> Any:
        return self.api.resources.get(api_version=api_version, kind=kind)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        found = self.resource(api_version, kind).get(namespace=namespace, label_selector=label_selector)
        return [item.to_dict() for item in found.items]

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        resource = self.resource(manifest["apiVersion"], manifest["kind"])
        return resource.create(body=manifest, namespace=manifest["metadata"]["namespace"], field_manager=FIELD_MANAGER).to_dict()

    def apply(self, manifest: dict[str, Any]) -> Outcome:
        """Create ``manifest``, or server-side apply it if the result would differ from what is stored.

        Created by a server-side apply too: the fields are then owned by this apply, so a later apply
        that leaves one out removes it (a create would own them as an update, and they would stay).
        """
        meta = manifest["metadata"]
        actual = self.get(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
        if actual is None:
            self._apply(manifest, dry_run=False)
            return "created"
        if not differs(self._apply(manifest, dry_run=True), actual):
            return "unchanged"
        self._apply(manifest, dry_run=False)
        return "updated"

    def _apply(self, manifest: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        resource = self.resource(manifest["apiVersion"], manifest["kind"])
        kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force_conflicts": True}
        if dry_run:
            kwargs["dry_run"] = "All"
        return self.api.server_side_apply(resource, body=manifest, namespace=manifest["metadata"]["namespace"], **kwargs).to_dict()

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        apps = client.AppsV1Api(self.api.client)
        apps.patch_namespaced_deployment_scale(name, namespace, {"spec": {"replicas": replicas}}, field_manager=FIELD_MANAGER)

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete if present; False when it was not there (or its kind is not installed)."""
        try:
            self.resource(api_version, kind).delete(name=name, namespace=namespace, propagation_policy="Background")
            return True
        except (NotFoundError, ResourceNotFoundError):
            return False

    def kind_installed(self, api_version: str, kind: str) -> bool:
        try:
            self.resource(api_version, kind)
            return True
        except ResourceNotFoundError:
            return False


def differs(desired: dict[str, Any], actual: dict[str, Any]) -> bool:
    for key in COMPARED:
        if desired.get(key) != actual.get(key):
            return True
    dm, am = desired.get("metadata", {}), actual.get("metadata", {})
    return any(dm.get(key) != am.get(key) for key in COMPARED_META)
