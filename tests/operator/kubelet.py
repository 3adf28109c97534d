"""The kubelet's part, played by the tests: envtest has no kubelet, so pods never run.

The Deployment and ReplicaSet controllers create real Pods; these helpers write into those
Pods' status what a kubelet would after running (or failing to run) the worker container,
through the same API (the pods/status subresource). Everything the operator reads from
there — readiness, termination messages, CrashLoopBackOff — is then exactly what it would
read on a cluster with nodes.
"""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient

WORKER = "worker"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def worker_pods(api: DynamicClient, ns: str, pipeline: str) -> list[dict[str, Any]]:
    """The Pipeline's worker pods that are not on their way out."""
    pods = client.CoreV1Api(api.client).list_namespaced_pod(
        ns, label_selector=f"knarr.dev/pipeline={pipeline},app.kubernetes.io/component=worker")
    return [api.client.sanitize_for_serialization(p) for p in pods.items if p.metadata.deletion_timestamp is None]


def _patch_status(api: DynamicClient, ns: str, pod: dict[str, Any], ready: bool, container: dict[str, Any]) -> None:
    conditions = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()},
        {"type": "Initialized", "status": "True", "lastTransitionTime": _now()},
        {"type": "ContainersReady", "status": str(ready), "lastTransitionTime": _now()},
        {"type": "Ready", "status": str(ready), "lastTransitionTime": _now()},
    ]
    image = pod["spec"]["containers"][0]["image"]
    status = {"name": WORKER, "image": image, "imageID": "", "ready": ready, **container}
    body = {"status": {"phase": "Running", "conditions": conditions, "containerStatuses": [status]}}
    client.CoreV1Api(api.client).patch_namespaced_pod_status(pod["metadata"]["name"], ns, body)


def run_ready(api: DynamicClient, ns: str, pod: dict[str, Any]) -> None:
    """The worker started and its readiness probe passes."""
    _patch_status(api, ns, pod, True, {"restartCount": 0, "started": True, "state": {"running": {"startedAt": _now()}}})


def crash_loop(api: DynamicClient, ns: str, pod: dict[str, Any], message: str, exit_code: int) -> None:
    """The worker exited with ``exit_code`` leaving ``message`` in its termination log, and waits to be restarted."""
    _patch_status(api, ns, pod, False, {
        "restartCount": 3,
        "started": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff",
                              "message": f"back-off 40s restarting failed container={WORKER} pod={pod['metadata']['name']}"}},
        "lastState": {"terminated": {"exitCode": exit_code, "reason": "Error", "message": message,
                                     "startedAt": _now(), "finishedAt": _now()}},
    })
