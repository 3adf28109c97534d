"""The Pipeline CRD is generated from the worker's models and checked in without drift."""

from __future__ import annotations

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
    assert set(kafka) == {"brokers", "sourceTopic", "consumerGroup", "maxPollRecords", "maxPollIntervalMs", "sessionTimeoutMs", "heartbeatIntervalMs", "extra"}
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


def test_printer_columns_show_ready_replicas_lag_and_age():
    columns = [c["name"] for c in pipeline_crd()["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Ready", "Replicas", "Lag", "Age"]


def test_the_example_pipeline_is_a_valid_spec_for_the_operator_and_the_worker():
    import yaml

    from knarr_operator.spec import split_spec
    from knarr_operator.worker_config import render_worker_config

    example = yaml.safe_load((repo_root() / "examples" / "pipeline.yaml").read_text())
    _, worker = split_spec(example["spec"])
    assert render_worker_config(worker).validated.kafka.source_topic == "search-requests"
