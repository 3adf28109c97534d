"""The Pipeline CustomResourceDefinition, generated from the worker's and the operator's models.

``python -m knarr_operator.crd`` (or ``make crds``) writes it to ``crds/`` and into
the Helm chart; a test regenerates it and fails when the checked-in copies drift.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from knarr.config import KnarrConfig

from knarr_operator.schema import model_schema
from knarr_operator.spec import OperatorSpec

GROUP = "knarr.dev"
VERSION = "v1alpha1"
PLURAL = "pipelines"
KIND = "Pipeline"
CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILE = f"{CRD_NAME}.yaml"

# Worker settings that make no sense in a cluster: the source is always the Kafka
# topic, the pod name is always in WORKER_ID, and the handler is the operator's own
# `handler` field (passed as --handler).
WORKER_FIELDS_NOT_IN_RESOURCE = frozenset({"source", "worker_name_env", "cluster_name_env", "handler"})

# CEL rules must fit the API server's cost budget, so maps and lists are bounded.
MAX_PARTITIONS = 64
MAX_BACKFILLS = 20

SCALING_RULES = [
    {
        "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
        "message": "minReplicas must not exceed maxReplicas",
        "fieldPath": ".minReplicas",
    }
]

RANGE_END_RULES = [
    {"rule": "has(self.timestamp) != has(self.offsets)", "message": "give exactly one of timestamp or offsets"},
]

BACKFILL_RULES = [
    {
        "rule": "has(self.from.timestamp) == has(self.to.timestamp)",
        "message": "from and to must both be timestamps or both be offsets",
    },
    {
        "rule": "!has(self.from.timestamp) || !has(self.to.timestamp) || timestamp(self.from.timestamp) < timestamp(self.to.timestamp)",
        "message": "from.timestamp must be before to.timestamp",
        "fieldPath": ".from.timestamp",
    },
    {
        "rule": "!has(self.from.offsets) || !has(self.to.offsets) || "
        "(self.from.offsets.all(p, p in self.to.offsets && self.to.offsets[p] >= self.from.offsets[p]) && "
        "self.to.offsets.all(p, p in self.from.offsets))",
        "message": "to.offsets must name the same partitions as from.offsets, each with an offset >= its from offset",
        "fieldPath": ".to.offsets",
    },
]

BACKFILLS_RULES = [
    {"rule": "self.all(b, self.exists_one(c, c.name == b.name))", "message": "backfill names must be unique"},
]


def spec_schema() -> dict[str, Any]:
    worker = model_schema(KnarrConfig, exclude=WORKER_FIELDS_NOT_IN_RESOURCE)
    ours = model_schema(OperatorSpec, defaults=True)
    scaling = ours["properties"]["scaling"]
    scaling["x-kubernetes-validations"] = SCALING_RULES
    scaling["default"] = {}
    scaling["properties"]["keda"]["default"] = {}
    ours["properties"]["rollout"]["default"] = {}  # so the API server fills in the deadline and autoRollback
    backfills = ours["properties"]["backfills"]
    backfills["x-kubernetes-validations"] = BACKFILLS_RULES
    backfill = backfills["items"]
    backfill["x-kubernetes-validations"] = BACKFILL_RULES
    for end in ("from", "to"):
        backfill["properties"][end]["x-kubernetes-validations"] = RANGE_END_RULES
        offsets = backfill["properties"][end]["properties"]["offsets"]
        offsets["maxProperties"] = MAX_PARTITIONS
        offsets["additionalProperties"]["minimum"] = 0
    return {
        "type": "object",
        "description": "A knarr worker fleet: the handler image, the worker's configuration (kafka, executor, sinks, …), scaling and backfills.",
        "required": ours["required"],
        "properties": {**worker["properties"], **ours["properties"]},
    }


def status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string"},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
            "observedGeneration": {"type": "integer"},
        },
    }
    backfill = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "phase": {"type": "string"},
            "sparkApplication": {"type": "string"},
            "finished": {"type": "boolean", "description": "Completed or failed; never re-run."},
            "reason": {"type": "string", "description": "Why it failed, when the operator gave up on it (e.g. SubmissionDeadlineExceeded)."},
            "message": {"type": "string"},
        },
    }
    spec_ref = {
        "type": "object",
        "properties": {"generation": {"type": "integer"}, "hash": {"type": "string", "description": "Of the spec's workload part."}},
    }
    rollout = {
        "type": "object",
        "description": "The spec being rolled out, since when (its workers must be ready within spec.rollout.readyDeadlineSeconds).",
        "properties": {**spec_ref["properties"], "startedAt": {"type": "string", "format": "date-time"}},
    }
    rolled_back = {
        "type": "object",
        "description": "The spec that missed its deadline, why, and which generation's spec the workers run instead.",
        "properties": {
            **spec_ref["properties"],
            "restartNonce": {"type": "string"},
            "reason": {"type": "string"},
            "message": {"type": "string"},
            "toGeneration": {"type": "integer"},
            "deadlineSeconds": {"type": "integer"},
        },
    }
    failure = {
        "type": "object",
        "description": "Why workers are failing, from their pods (the worker's termination message, or the kubelet's reason).",
        "properties": {"reason": {"type": "string"}, "message": {"type": "string"}},
    }
    return {
        "type": "object",
        "properties": {
            "observedGeneration": {"type": "integer"},
            "conditions": {"type": "array", "items": condition},
            "replicas": {"type": "integer"},
            "readyReplicas": {"type": "integer"},
            "lag": {"type": "integer"},
            "partitions": {"type": "integer"},
            "lowLagSince": {"type": "string", "description": "Since when the lag would allow fewer workers (scale-down delay)."},
            "backfills": {"type": "array", "items": backfill},
            "lastReadySpec": {**spec_ref, "description": "The last spec whose workers all became ready: what a rollback goes back to."},
            "rollout": rollout,
            "rolledBack": rolled_back,
            "workerFailure": failure,
        },
    }


def pipeline_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL,
                "singular": "pipeline",
                "kind": KIND,
                "listKind": "PipelineList",
                "shortNames": ["kp", "pipe"],
                "categories": ["knarr"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                        {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
                        {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
                        {"name": "Lag", "type": "integer", "jsonPath": ".status.lag"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def render_yaml() -> str:
    header = "# Generated by `python -m knarr_operator.crd` (make crds) from the worker's config models. Do not edit.\n"
    return header + yaml.safe_dump(pipeline_crd(), sort_keys=False, width=120)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def crd_paths(root: Path) -> list[Path]:
    return [root / "crds" / CRD_FILE, root / "charts" / "knarr-operator" / "crds" / CRD_FILE]


def main(argv: list[str] | None = None) -> int:
    root = Path(argv[0]) if argv else repo_root()
    text = render_yaml()
    for path in crd_paths(root):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
