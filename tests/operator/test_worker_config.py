"""The worker's config file is rendered in the worker's own keys and validated by the worker."""

from __future__ import annotations

import pytest
from knarr.config import load_config
from knarr.sinks import registry

from knarr_operator.spec import split_spec
from knarr_operator.preflight import preflight
from knarr_operator.worker_config import InvalidConfig, render_worker_config


def test_config_uses_the_workers_snake_case_keys(sample_spec):
    _, worker = split_spec(sample_spec)
    data = render_worker_config(worker).data
    assert data["kafka"]["source_topic"] == "search-requests"
    assert data["executor"]["max_executors"] == 8
    assert data["sinks"]["filesystem"]["logs"] == {"base_path": "/data"}


def test_user_chosen_keys_are_not_renamed(sample_spec):
    sample_spec["kafka"]["extra"] = {"security.protocol": "SASL_SSL", "someCamel": "x"}
    sample_spec["sinks"]["kafka"] = {"myResults": {"topic": "t"}}
    _, worker = split_spec(sample_spec)
    data = render_worker_config(worker).data
    assert data["kafka"]["extra"] == {"security.protocol": "SASL_SSL", "someCamel": "x"}
    assert "myResults" in data["sinks"]["kafka"]


def test_a_secret_dsn_becomes_an_env_override_and_stays_out_of_the_file(sample_spec):
    _, worker = split_spec(sample_spec)
    config = render_worker_config(worker)
    assert "dsn" not in config.data["sinks"]["postgres"]["main"]
    assert "secret" not in config.to_yaml()
    (ref,) = config.secrets
    assert ref.env_var() == {"name": "KNARR_SINKS__POSTGRES__main__DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}


def test_the_worker_reads_the_secret_override_over_the_rendered_file(sample_spec, tmp_path):
    _, worker = split_spec(sample_spec)
    config = render_worker_config(worker)
    path = tmp_path / "config.yaml"
    path.write_text(config.to_yaml())
    loaded = load_config(path, env={config.secrets[0].env_name: "postgresql://u:p@db/x"})
    assert loaded.sinks.postgres["main"].dsn == "postgresql://u:p@db/x"


def test_a_config_the_worker_rejects_is_an_error_naming_the_key(sample_spec):
    sample_spec["kafka"].update(heartbeatIntervalMs=50_000, sessionTimeoutMs=45_000)
    _, worker = split_spec(sample_spec)
    with pytest.raises(InvalidConfig, match="heartbeat_interval_ms"):
        render_worker_config(worker)


def test_a_pipeline_without_sinks_is_rejected_with_the_workers_message(sample_spec):
    sample_spec["sinks"] = {}
    _, worker = split_spec(sample_spec)
    with pytest.raises(InvalidConfig, match="no sink is configured"):
        render_worker_config(worker)


def test_a_static_group_member_id_is_rejected_because_every_replica_would_share_it(sample_spec):
    sample_spec["kafka"]["extra"] = {"group.instance.id": "worker"}
    _, worker = split_spec(sample_spec)
    with pytest.raises(InvalidConfig, match=r"kafka.extra.group.instance.id: every worker of a Pipeline reads the same config"):
        render_worker_config(worker)


def test_a_loopback_metrics_host_is_rejected_because_the_kubelet_probes_the_pod_ip(sample_spec):
    sample_spec["metrics"] = {"host": "127.0.0.1"}
    _, worker = split_spec(sample_spec)
    with pytest.raises(InvalidConfig, match=r"metrics.host '127.0.0.1': the kubelet probes the pod's IP"):
        render_worker_config(worker)


def test_disabled_metrics_are_rejected_because_the_probes_need_them(sample_spec):
    sample_spec["metrics"] = {"enabled": False}
    _, worker = split_spec(sample_spec)
    with pytest.raises(InvalidConfig, match="metrics.enabled"):
        render_worker_config(worker)


def checked(spec):
    operator, worker = split_spec(spec)
    config = render_worker_config(worker, operator.env)
    preflight(config)
    return config


def test_a_sink_type_the_workers_registry_lacks_is_refused_before_rollout(sample_spec, monkeypatch):
    # A worker version without filesystem sinks: the operator asks the worker's own registry.
    monkeypatch.delitem(registry.BUILTIN, "filesystem")
    sample_spec["sinks"] = {"filesystem": sample_spec["sinks"]["filesystem"]}
    with pytest.raises(InvalidConfig, match=r"sinks\.filesystem\.logs: this knarr version has no filesystem sink \(it has: http, kafka, mongo, postgres, redis, and plug-ins under sinks\.plugin\); remove it or upgrade knarr"):
        checked(sample_spec)


def test_consumer_settings_librdkafka_refuses_are_refused_before_rollout(sample_spec):
    del sample_spec["sinks"]["postgres"]
    sample_spec["kafka"]["extra"] = {"fetch.max.bytes": "lots"}
    with pytest.raises(InvalidConfig, match=r"kafka\.extra\.fetch\.max\.bytes: the Kafka client \(librdkafka\) refuses"):
        checked(sample_spec)


def test_files_named_in_kafka_extra_are_left_to_the_pod_that_mounts_them(sample_spec):
    del sample_spec["sinks"]["postgres"]
    sample_spec["kafka"]["extra"] = {"security.protocol": "SSL", "ssl.ca.location": "/etc/kafka-ca/ca.pem"}
    assert checked(sample_spec).validated.kafka.extra["ssl.ca.location"] == "/etc/kafka-ca/ca.pem"


def test_knarr_overrides_in_env_are_merged_as_the_worker_merges_them(sample_spec):
    del sample_spec["sinks"]["postgres"]
    sample_spec["env"] = [{"name": "KNARR_METRICS__PORT", "value": "9300"}]
    assert checked(sample_spec).validated.metrics.port == 9300


def test_a_knarr_override_the_worker_would_refuse_is_refused_before_rollout(sample_spec):
    sample_spec["env"] = [{"name": "KNARR_EXECUTOR__WINDOW_SIZE", "value": "many"}]
    with pytest.raises(InvalidConfig, match=r"executor\.window_size: Input should be a valid integer"):
        checked(sample_spec)


def test_an_override_from_a_secret_is_checked_by_its_name(sample_spec):
    sample_spec["env"] = [{"name": "KNARR_EXECUTOR__NO_SUCH_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    with pytest.raises(InvalidConfig, match=r"KNARR_EXECUTOR__NO_SUCH_KEY: no config key 'executor\.no_such_key'"):
        checked(sample_spec)


def test_env_the_worker_leaves_alone_passes_and_a_misspelt_override_is_refused_naming_the_right_one(sample_spec):
    del sample_spec["sinks"]["postgres"]
    sample_spec["env"] = [{"name": "KNARR_CACHE_DIR", "value": "/cache"}]
    assert checked(sample_spec).validated.metrics.port == 9090
    sample_spec["env"] = [{"name": "KNARR_METRICS_PORT", "value": "9300"}]
    with pytest.raises(InvalidConfig, match=r"KNARR_METRICS_PORT: not a config override; did you mean KNARR_METRICS__PORT\?"):
        checked(sample_spec)
