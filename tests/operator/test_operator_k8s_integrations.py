"""What the operator writes for KEDA and the Spark operator survives their real CRDs, and it gives up on stuck backfills.

The API server runs with KEDA's and the Spark operator's own CRDs (fixtures/README.md names
the versions): structural schemas that prune unknown fields. So each test reads back what
the operator wrote and checks that every field it rendered is still there, as rendered.
Neither controller runs: the Spark operator's part is played by patching a SparkApplication's
status through the API, as its controller would.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from knarr_operator.manifests import PipelineRef, render_children
from knarr_operator.spec import split_spec
from knarr_operator.worker_config import render_worker_config

from tests.operator.cluster_helpers import (
    SPARK,
    condition,
    create_pipeline,
    get,
    patch_pipeline,
    pipeline,
    set_spark_state,
    wait_for,
)
from tests.operator.test_operator_k8s import spec_for

pytestmark = [pytest.mark.k8s, pytest.mark.kafka]

OPERATED = "knarr-int-"  # namespaces this module's operator watches
OPERATOR_RESYNC_SECONDS = 2  # deadlines are noticed within seconds
KEDA = "keda.sh/v1alpha1"
BACKFILL_APP = "search-replay-2026-11-01"


def rendered(api, ns: str, name: str) -> Any:
    """What the operator renders for the Pipeline as the API server holds it (defaults filled in)."""
    body = pipeline(api, ns, name)
    spec, worker = split_spec(body["spec"])
    return render_children(PipelineRef.from_body(body), spec, render_worker_config(worker, spec.env), None)


def missing(wrote: Any, stored: Any, path: str = "") -> list[str]:
    """Every field of ``wrote`` that ``stored`` lacks or holds differently (the API server may add, never drop)."""
    if isinstance(wrote, dict) and isinstance(stored, dict):
        return [p for key, value in wrote.items() for p in missing(value, stored.get(key, _ABSENT), f"{path}.{key}")]
    if isinstance(wrote, list) and isinstance(stored, list) and len(wrote) == len(stored):
        return [p for i, (w, s) in enumerate(zip(wrote, stored, strict=True)) for p in missing(w, s, f"{path}[{i}]")]
    return [] if wrote == stored else [f"{path}: wrote {wrote!r}, stored {stored!r}"]


_ABSENT = object()


def secret(api, ns: str, name: str, data: dict[str, str]) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    client.CoreV1Api(api.client).create_namespaced_secret(ns, {"metadata": {"name": name}, "data": encoded})


def events(api, ns: str, match: Callable[[Any], bool]) -> list[Any]:
    return [e for e in client.CoreV1Api(api.client).list_namespaced_event(ns).items
            if e.involved_object.kind == "Pipeline" and match(e)]


def test_with_keda_the_scaled_object_signs_in_through_a_trigger_authentication_and_both_survive_the_real_crds(api, operator, ns, kafka_bootstrap, topic):
    secret(api, ns, "kafka", {"password": "s3cret"})
    spec = spec_for(kafka_bootstrap, topic, engine="keda", keda={"activationLagThreshold": 25, "limitToPartitionsWithLag": True})
    spec["kafka"]["extra"] = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "search",
        "sasl.password": {"valueFrom": {"secretKeyRef": {"name": "kafka", "key": "password"}}},
    }
    create_pipeline(api, ns, "search", spec)
    scaled = wait_for(lambda: get(api, KEDA, "ScaledObject", ns, "search"), 60, "the ScaledObject")
    auth = get(api, KEDA, "TriggerAuthentication", ns, "search")
    plain = get(api, "v1", "ConfigMap", ns, "search-keda-auth")
    children = {m["kind"] + "/" + m["metadata"]["name"]: m for m in rendered(api, ns, "search").workload}
    for stored in (scaled, auth, plain):
        wrote = children[f"{stored['kind']}/{stored['metadata']['name']}"]
        assert missing({k: wrote[k] for k in ("spec", "data") if k in wrote}, stored) == []
    assert auth["spec"] == {
        "secretTargetRef": [{"parameter": "password", "name": "kafka", "key": "password"}],
        "configMapTargetRef": [{"parameter": "username", "name": "search-keda-auth", "key": "username"}],
    }
    assert plain["data"] == {"username": "search"}
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["authenticationRef"] == {"name": "search", "kind": "TriggerAuthentication"}
    assert {k: trigger["metadata"][k] for k in ("tls", "sasl", "offsetResetPolicy", "activationLagThreshold",
                                                 "limitToPartitionsWithLag", "excludePersistentLag")} == {
        "tls": "enable", "sasl": "scram_sha512", "offsetResetPolicy": "earliest", "activationLagThreshold": "25",
        "limitToPartitionsWithLag": "true", "excludePersistentLag": "false",
    }  # fmt: skip

    patch_pipeline(api, ns, "search", {"scaling": {"engine": "builtin"}})
    wait_for(lambda: not any((get(api, KEDA, "ScaledObject", ns, "search"), get(api, KEDA, "TriggerAuthentication", ns, "search"),
                              get(api, "v1", "ConfigMap", ns, "search-keda-auth"))), 60, "KEDA's objects removed")


def test_a_kafka_sign_in_keda_cannot_use_is_refused_before_anything_rolls_out(api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic, engine="keda")
    spec["kafka"]["extra"] = {"security.protocol": "SSL", "ssl.ca.location": "/etc/kafka/ca.pem"}
    create_pipeline(api, ns, "search", spec)
    ready = wait_for(lambda: condition(pipeline(api, ns, "search"), "Ready").get("reason") == "ConfigRejected"
                     and condition(pipeline(api, ns, "search"), "Ready"), 30, "Ready=False, ConfigRejected")
    assert "kafka.extra.ssl.ca.location: names a file in the worker's pod, which KEDA cannot read" in ready["message"]
    assert get(api, "apps/v1", "Deployment", ns, "search") is None


def test_a_backfills_spark_application_with_pod_templates_and_a_time_to_live_survives_the_real_crd(api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic)
    spec["executor"]["env"] = {"API_TOKEN": {"valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}}}
    spec["backfills"][0]["timeToLiveSeconds"] = 7200
    create_pipeline(api, ns, "search", spec)
    stored = wait_for(lambda: get(api, *SPARK, ns, BACKFILL_APP), 60, "the SparkApplication")
    wrote = rendered(api, ns, "search").backfills["replay-2026-11-01"]
    assert missing(wrote["spec"], stored["spec"]) == []
    assert stored["spec"]["timeToLiveSeconds"] == 7200
    for role in ("driver", "executor"):
        (container,) = stored["spec"][role]["template"]["spec"]["containers"]
        assert {"name": "KNARR_EXECUTOR__ENV__API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}} in container["env"]
        assert {"name": "config", "mountPath": "/etc/knarr", "readOnly": True} in container["volumeMounts"]
        assert {"name": "config", "configMap": {"name": "search-config"}} in stored["spec"][role]["template"]["spec"]["volumes"]
    # The status is written at the end of the sync that created the SparkApplication.
    wait_for(lambda: (pipeline(api, ns, "search").get("status", {}).get("backfills") or [{}])[0].get("phase") == "SUBMITTED",
             30, "the backfill recorded as SUBMITTED")


def test_a_backfill_whose_driver_never_starts_by_its_submission_deadline_fails_with_a_reason_and_an_event(api, operator, ns, kafka_bootstrap, topic):
    spec = spec_for(kafka_bootstrap, topic)
    spec["backfills"][0]["submissionDeadlineSeconds"] = 10
    create_pipeline(api, ns, "search", spec)
    wait_for(lambda: get(api, *SPARK, ns, BACKFILL_APP), 60, "the SparkApplication")
    set_spark_state(api, ns, BACKFILL_APP, "SUBMITTED")  # spark-submit ran; the driver pod stays Pending (no node)

    entry = wait_for(lambda: (pipeline(api, ns, "search").get("status", {}).get("backfills") or [{}])[0].get("finished")
                     and pipeline(api, ns, "search")["status"]["backfills"][0], 60, "the backfill given up on")
    assert {k: entry[k] for k in ("phase", "reason", "sparkApplication")} == {
        "phase": "FAILED", "reason": "SubmissionDeadlineExceeded", "sparkApplication": BACKFILL_APP}
    assert entry["message"].startswith(f"SparkApplication {BACKFILL_APP} was still SUBMITTED: its driver never started")
    wait_for(lambda: get(api, *SPARK, ns, BACKFILL_APP) is None, 30, "the SparkApplication deleted")
    (event,) = wait_for(lambda: events(api, ns, lambda e: e.reason == "BackfillFailed"), 30, "a BackfillFailed event")
    assert event.type == "Warning"
    assert event.message.startswith("backfill replay-2026-11-01: FAILED (SubmissionDeadlineExceeded): SparkApplication")
