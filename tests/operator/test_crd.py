"""The Pipeline CRD is generated from the worker's models and checked in without drift."""

from __future__ import annotations

import re

from knarr.config import KafkaConfig

from knarr_operator.crd import crd_paths, pipeline_crd, render_yaml, repo_root


def _spec_props() -> dict:
    return pipeline_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def test_checked_in_crds_match_the_generated_one_run_make_crds_if_not():
    expected = render_yaml()
    for path in crd_paths(repo_root()):
        assert path.read_text() == expected, f"{path} is stale; run `make crds`"


def test_every_worker_kafka_setting_appears_in_camel_case():
    kafka = _spec_props()["kafka"]["properties"]
    assert set(kafka) == {"brokers", "sourceTopic", "consumerGroup", "maxPollRecords", "maxPollIntervalMs", "sessionTimeoutMs",
                          "heartbeatIntervalMs", "startupTimeoutSeconds", "ownershipCheckSeconds", "extra"}
    assert len(kafka) == len(KafkaConfig.model_fields)


def test_worker_constraints_carry_over_to_the_schema():
    executor = _spec_props()["executor"]["properties"]
    assert executor["maxExecutors"]["minimum"] == 1
    assert executor["taskTimeoutSeconds"] == {**executor["taskTimeoutSeconds"], "minimum": 0, "exclusiveMinimum": True}


def test_required_sink_fields_are_required_in_the_schema():
    kafka_sink = _spec_props()["sinks"]["properties"]["kafka"]["additionalProperties"]
    assert kafka_sink["required"] == ["topic"]


def test_credential_fields_accept_a_secret_key_ref():
    dsn = _spec_props()["sinks"]["properties"]["postgres"]["additionalProperties"]["properties"]["dsn"]
    assert dsn["x-kubernetes-preserve-unknown-fields"] is True
    assert "secretKeyRef" in dsn["description"]


def test_every_value_of_a_credential_map_accepts_a_secret_key_ref():
    props = _spec_props()
    maps = [
        props["kafka"]["properties"]["extra"],
        props["executor"]["properties"]["env"],
        props["sinks"]["properties"]["kafka"]["additionalProperties"]["properties"]["extra"],
        props["sinks"]["properties"]["http"]["additionalProperties"]["properties"]["headers"],
    ]
    for schema in maps:
        assert schema["additionalProperties"] == {"x-kubernetes-preserve-unknown-fields": True}
        assert "secretKeyRef" in schema["description"]


def test_the_local_source_is_not_offered_on_kubernetes():
    assert "source" not in _spec_props()


def test_printer_columns_show_ready_and_why_not_replicas_lag_and_age():
    columns = [c["name"] for c in pipeline_crd()["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Ready", "Reason", "Replicas", "Lag", "Age"]


def test_the_example_pipeline_is_a_valid_spec_for_the_operator_and_the_worker():
    import yaml

    from knarr_operator.spec import split_spec
    from knarr_operator.worker_config import render_worker_config

    example = yaml.safe_load((repo_root() / "examples" / "pipeline.yaml").read_text())
    _, worker = split_spec(example["spec"])
    assert render_worker_config(worker).validated.kafka.source_topic == "search-requests"


def _described(schema: dict, path: str = "spec") -> list[tuple[str, dict]]:
    """(path, schema) of every property below ``schema``."""
    out = []
    for key, prop in (schema.get("properties") or {}).items():
        out.append((f"{path}.{key}", prop))
        out += _described(prop, f"{path}.{key}")
    if isinstance(schema.get("additionalProperties"), dict):
        out += _described(schema["additionalProperties"], f"{path}.<name>")
    if isinstance(schema.get("items"), dict):
        out += _described(schema["items"], f"{path}[]")
    return out


def _spec_schema() -> dict:
    return pipeline_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_kubectl_explain_has_a_description_for_every_field():
    missing = [path for path, prop in _described(_spec_schema()) if not prop.get("description")]
    assert missing == []


def test_descriptions_name_fields_in_camel_case_and_never_print_none():
    from knarr_operator.schema import field_names

    snake = {name for name in field_names() if "_" in name}
    for path, prop in _described(_spec_schema()):
        text = prop.get("description", "")
        assert "None" not in text, f"{path}: {text}"
        assert not [w for w in re.findall(r"[a-z0-9_]+", text) if w in snake], f"{path}: {text}"


def test_descriptions_show_the_real_defaults():
    executor = _spec_props()["executor"]["properties"]
    assert executor["maxExecutors"]["description"].endswith("Default: 4.")
    assert executor["taskTimeoutSeconds"]["description"].endswith("Default: 120.")
    assert _spec_props()["kafka"]["properties"]["brokers"]["description"].endswith("Default: localhost:9092.")
    assert _spec_props()["metrics"]["properties"]["enabled"]["description"] == "Serve /metrics, /healthz and /readyz. Default: true."
    assert "Default:" not in executor["binaryPath"]["description"]  # no default: it says what unset means instead
    assert _spec_props()["scaling"]["properties"]["engine"]["description"].endswith("Default: builtin.")
