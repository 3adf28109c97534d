"""What every child shares: names, labels, the ownerReference, content hashes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from knarr_operator.crd import GROUP, KIND, VERSION

MANAGED_BY = "knarr-operator"
PIPELINE_LABEL = "knarr.dev/pipeline"
SPEC_HASH_ANNOTATION = "knarr.dev/spec-hash"
CONFIG_HASH_ANNOTATION = "knarr.dev/config-hash"
SECRETS_HASH_ANNOTATION = "knarr.dev/secrets-hash"  # of the referenced Secrets' values: a change rolls the pods
RESTART_NONCE_ANNOTATION = "knarr.dev/restart-nonce"  # spec.restartNonce on the pod template: a change rolls the pods
WORKLOAD_HASH_ANNOTATION = "knarr.dev/workload-hash"  # on the Deployment: which spec its pod template runs (rollout.py)
RESUME_REPLICAS_ANNOTATION = "knarr.dev/resume-replicas"  # on a suspended Deployment: its replicas before


@dataclass(frozen=True)
class PipelineRef:
    """The owning Pipeline, as far as its children need to know it."""

    name: str
    namespace: str
    uid: str

    @classmethod
    def from_body(cls, body: Any) -> PipelineRef:
        meta = body["metadata"]
        return cls(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


def labels(pipeline: PipelineRef, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "knarr",
        "app.kubernetes.io/instance": pipeline.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        PIPELINE_LABEL: pipeline.name,
    }


def selector(pipeline: PipelineRef, component: str) -> dict[str, str]:
    return {PIPELINE_LABEL: pipeline.name, "app.kubernetes.io/component": component}


def owner_reference(pipeline: PipelineRef) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": pipeline.name,
        "uid": pipeline.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(pipeline: PipelineRef, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": pipeline.namespace,
        "labels": labels(pipeline, component),
        "ownerReferences": [owner_reference(pipeline)],
    }


def content_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def with_spec_hash(manifest: dict[str, Any], *, ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """Stamp the hash of the manifest (minus ``ignore``d spec keys) so drift is one string compare."""
    hashed = {k: v for k, v in manifest.items() if k != "spec"}
    hashed["spec"] = {k: v for k, v in manifest.get("spec", {}).items() if k not in ignore}
    manifest["metadata"].setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = content_hash(hashed)
    return manifest
