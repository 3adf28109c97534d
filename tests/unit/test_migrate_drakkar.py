"""knarr migrate-config: every Drakkar key is carried over, ignored because it changes nothing,
or listed as dropped with a reason; the exit code says which."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from knarr.config.loading import config_from_dict
from knarr.migrate.drakkar import migrate_config, migrate_env

FILE_SINK = {"sinks": {"filesystem": {"out": {"base_path": "/tmp/out"}}}}


@pytest.mark.parametrize("drakkar, knarr_key, value", [
    ({"sources": {"kafka": {"enabled": True, "topic": "in"}}}, "kafka.source_topic", "in"),
    ({"sources": {"kafka": {"enabled": True, "consumer_group": "g"}}}, "kafka.consumer_group", "g"),
    ({"sources": {"kafka": {"enabled": True, "max_poll_records": 7}}}, "kafka.max_poll_records", 7),
    ({"sources": {"kafka": {"enabled": True, "on_parse_error": "skip"}}}, "source.on_parse_error", "arrange"),
    ({"sources": {"kafka": {"enabled": True, "on_parse_error": "dlq"}}}, "source.on_parse_error", "dlq"),
    ({"kafka": {"source_topic": "old-layout"}}, "kafka.source_topic", "old-layout"),
    ({"kafka": {"brokers": "b:9092"}}, "kafka.brokers", "b:9092"),
    ({"kafka": {"client_config": {"fetch.min.bytes": "1"}}}, "kafka.extra", {"fetch.min.bytes": "1"}),
    ({"kafka": {"security": {"protocol": "SASL_SSL", "sasl_username": "u"}}}, "kafka.extra",
     {"security.protocol": "SASL_SSL", "sasl.username": "u"}),
    ({"sinks": {"kafka": {"out": {"topic": "t", "security": {"ssl_ca_location": "/ca"}}}}},
     "sinks.kafka.out.extra", {"ssl.ca.location": "/ca"}),
    ({"dlq": {"client_config": {"acks": "all"}}}, "dlq.extra", {"acks": "all"}),
    ({"executor": {"max_executors": 9, "env": {"A": "1"}}}, "executor.env", {"A": "1"}),
    ({"sinks": {"http": {"hook": {"url": "http://h", "headers": {"X": "y"}}}}}, "sinks.http.hook.headers", {"X": "y"}),
    ({"dlq": {"on_send_failure": "stall"}}, "dlq.on_send_failure", "stall"),
    ({"worker_name_env": "POD"}, "worker_name_env", "POD"),
    ({"cache": {"enabled": True, "max_memory_entries": 500}}, "cache.max_entries", 500),
    ({"debug": {"enabled": True, "retention_hours": 6}}, "debug.retention_hours", 6),
    ({"debug": {"enabled": False, "db_dir": "/data/recorder"}}, "debug.db_dir", "/data/recorder"),
])
def test_a_drakkar_key_lands_on_its_knarr_key(drakkar, knarr_key, value):
    migration = migrate_config(drakkar)
    node = migration.config
    for part in knarr_key.split("."):
        node = node[part]
    assert node == value
    assert migration.dropped == []


@pytest.mark.parametrize("drakkar, key, words", [
    ({"ui": {"enabled": True, "port": 8080}}, "ui", "debug UI of its own, set up under debug:"),
    ({"debug": {"port": 8080}}, "debug.enabled", "knarr's are off unless debug.enabled is true"),
    ({"debug": {"enabled": True, "custom_links": [{"name": "x", "url": "y"}]}}, "debug.custom_links",
     "{title, url}"),
    ({"cache": {"enabled": True, "peer_sync": {"enabled": True}}}, "cache.peer_sync", "set cache.shared.url"),
    ({"sources": {"kafka": {"enabled": True, "on_parse_error": "raise"}}}, "sources.kafka.on_parse_error",
     "value 'raise' has no knarr equivalent"),
    ({"sources": {"kafka": {"enabled": False}}}, "sources.kafka.enabled", "always consumes the Kafka source"),
    ({"sources": {"kafka": {"topic": "t"}}}, "sources.kafka.enabled", "unset, which in Drakkar 2.x means"),
    ({"sources": {"http": {"enabled": True}}}, "sources.http", "no HTTP source"),
    ({"executor": {"env_inherit_deny": ["*SECRET*"]}}, "executor.env_inherit_deny", "never reaches a task"),
    ({"executor": {"env_inherit_parent": True}}, "executor.env_inherit_parent", "executor.env_inherit names"),
    ({"executor": {"max_stdout_bytes": 1024}}, "executor.max_stdout_bytes", "executor.max_output_bytes"),
    ({"executor": {"max_stderr_bytes": 0}}, "executor.max_stderr_bytes", "never unlimited"),
    ({"sinks": {"custom": {"audit": {"class": "x"}}}}, "sinks.custom", "port each one as a plug-in"),
    ({"kafka": {"ui_url": "http://kafka-ui"}}, "kafka.ui_url", "debug.custom_links"),
    ({"sinks": {"postgres": {"db": {"dsn": "x", "statements": {"a": "select 1"}}}}},
     "sinks.postgres.db.statements", "named statements"),
    ({"sinks": {"circuit_breaker": {"failure_threshold": 3}}}, "sinks.circuit_breaker", "no circuit breaker"),
    ({"metrics": {"task_label_histograms": ["tier"]}}, "metrics.task_label_histograms", "executor.metric_labels"),
    ({"app": {"threshold": 3}}, "app", "no app: section"),
    ({"executor": {"max_executers": 3}}, "executor.max_executers", "check its spelling"),
])
def test_a_key_without_equivalent_is_listed_with_its_reason(drakkar, key, words):
    dropped = dict(migrate_config(drakkar).dropped)
    assert key in dropped
    assert words in dropped[key]


@pytest.mark.parametrize("drakkar, key", [
    ({"ui": {"enabled": False, "port": 8080}}, "ui"),
    ({"cache": {"enabled": True, "peer_sync": {"enabled": False}}}, "cache.peer_sync"),
    ({"sources": {"kafka": {"enabled": True}, "http": {"enabled": False}}}, "sources.http"),
    ({"sources": {"kafka": {"enabled": True}}}, "sources.kafka.enabled"),
    ({"logging": {"output": "stderr"}}, "logging.output"),
    ({"sinks": {"http": {"h": {"url": "http://h", "encoding": "json"}}}}, "sinks.http.h.encoding"),
])
def test_a_key_whose_value_is_already_knarrs_behaviour_is_ignored_not_dropped(drakkar, key):
    migration = migrate_config(drakkar)
    assert key in dict(migration.ignored)
    assert migration.dropped == []


def test_drakkar_defaults_that_differ_from_knarrs_are_written_out():
    migration = migrate_config({"sources": {"kafka": {"enabled": True, "topic": "in"}}})
    assert migration.config["kafka"]["consumer_group"] == "drakkar-workers"
    assert migration.config["dlq"]["on_send_failure"] == "drop"


def test_no_consumer_group_is_written_for_a_config_whose_kafka_source_is_off():
    migration = migrate_config({"sources": {"kafka": {"enabled": False}}})
    assert "consumer_group" not in migration.config.get("kafka", {})
    assert "sources.kafka.enabled" in dict(migration.dropped)


def test_a_key_set_in_both_layouts_to_different_values_is_reported_as_a_conflict():
    migration = migrate_config({"kafka": {"source_topic": "a"},
                                "sources": {"kafka": {"enabled": True, "topic": "b"}}})
    assert migration.config["kafka"]["source_topic"] == "a"
    assert "conflicts with kafka.source_topic" in dict(migration.dropped)["sources.kafka.topic"]


def test_a_full_drakkar_24_config_becomes_a_valid_knarr_config():
    drakkar = {
        "worker_name_env": "WORKER_ID", "cluster_name": "main",
        "kafka": {"brokers": "kafka:9092", "client_config": {"client.rack": "a"}},
        "sources": {"kafka": {"enabled": True, "topic": "requests", "consumer_group": "g", "max_poll_records": 50,
                              "on_parse_error": "dlq"}, "http": {"enabled": False}},
        "executor": {"binary_path": "/bin/cat", "max_executors": 2, "task_timeout_seconds": 30, "window_size": 10,
                     "max_retries": 1, "drain_timeout_seconds": 5},
        "sinks": {"kafka": {"results": {"topic": "results"}}, "filesystem": {"logs": {"base_path": "/tmp"}}},
        "dlq": {"topic": "", "on_send_failure": "stall"},
        "metrics": {"enabled": True, "port": 9090}, "logging": {"level": "INFO", "format": "json", "output": "stderr"},
        "ui": {"enabled": False},
    }
    migration = migrate_config(drakkar)
    assert migration.complete, migration.dropped
    config = config_from_dict(migration.config)
    assert (config.kafka.source_topic, config.kafka.consumer_group, config.source.on_parse_error) == (
        "requests", "g", "dlq")
    assert config.kafka.extra == {"client.rack": "a"}


@pytest.mark.parametrize("env, renamed, value", [
    ({"DK_KAFKA__BROKERS": "b:1"}, "KNARR_KAFKA__BROKERS", "b:1"),
    ({"DK_SOURCES__KAFKA__TOPIC": "in"}, "KNARR_KAFKA__SOURCE_TOPIC", "in"),
    ({"DK_SOURCES__KAFKA__ON_PARSE_ERROR": "skip"}, "KNARR_SOURCE__ON_PARSE_ERROR", "arrange"),
    ({"DK_KAFKA__SECURITY__SASL_PASSWORD": "pw"}, "KNARR_KAFKA__EXTRA__sasl.password", "pw"),
    ({"DK_SINKS__POSTGRES__MAIN__DSN": "postgres://x"}, "KNARR_SINKS__POSTGRES__MAIN__DSN", "postgres://x"),
    ({"DK_CONFIG": "/etc/w.yaml"}, "KNARR_CONFIG", "/etc/w.yaml"),
])
def test_a_dk_variable_is_renamed_to_its_knarr_variable(env, renamed, value):
    migration = migrate_env(env)
    assert list(migration.renamed.values()) == [renamed]
    assert migration.values[renamed] == value


def test_dk_variables_without_equivalent_are_listed_and_others_are_left_alone():
    migration = migrate_env({"DK_UI__PORT": "8080", "DK_UI__ENABLED": "false", "PATH": "/bin"})
    assert [name for name, _ in migration.dropped] == []  # the whole ui section is disabled
    migration = migrate_env({"DK_UI__PORT": "8080", "PATH": "/bin"})
    assert [name for name, _ in migration.dropped] == ["DK_UI__PORT"]
    assert migration.renamed == {}


def test_a_renamed_extra_property_variable_is_read_by_knarr():
    from knarr.config.loading import load_config

    env = migrate_env({"DK_KAFKA__SECURITY__PROTOCOL": "SASL_SSL"}).values
    config = load_config(None, env={**env, "KNARR_SINKS__FILESYSTEM__OUT__BASE_PATH": "/tmp"})
    assert config.kafka.extra == {"security.protocol": "SASL_SSL"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "knarr.cli", "migrate-config", *args],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})


def test_the_command_exits_0_and_writes_a_loadable_config_when_everything_maps(tmp_path):
    source = tmp_path / "drakkar.yaml"
    source.write_text(yaml.safe_dump({"sources": {"kafka": {"enabled": True, "topic": "in"}}, **FILE_SINK}))
    proc = _cli(str(source), "-o", str(tmp_path / "knarr.yaml"))
    assert proc.returncode == 0, proc.stderr
    from knarr.config.loading import load_config

    assert load_config(tmp_path / "knarr.yaml", env={}).kafka.source_topic == "in"
    assert "sources.kafka.topic -> kafka.source_topic" in proc.stderr


def test_the_command_exits_1_listing_each_key_without_equivalent(tmp_path):
    source = tmp_path / "drakkar.yaml"
    source.write_text(yaml.safe_dump({"sources": {"kafka": {"enabled": True}}, "ui": {"enabled": True},
                                      **FILE_SINK}))
    env_file = tmp_path / "worker.env"
    env_file.write_text("DK_KAFKA__BROKERS=b:1\nexport DK_UI__PORT=9\n")
    proc = _cli(str(source), "-o", str(tmp_path / "knarr.yaml"), "--env-file", str(env_file),
                "--env-out", str(tmp_path / "knarr.env"))
    assert proc.returncode == 1
    assert "ui: knarr has a flight recorder and debug UI of its own" in proc.stderr
    assert "env DK_UI__PORT:" in proc.stderr
    assert (tmp_path / "knarr.env").read_text() == "KNARR_KAFKA__BROKERS=b:1\n"


def test_the_command_exits_1_when_the_result_is_not_a_valid_knarr_config(tmp_path):
    source = tmp_path / "drakkar.yaml"
    source.write_text(yaml.safe_dump({"sources": {"kafka": {"enabled": True}}}))  # no sink at all
    proc = _cli(str(source))
    assert proc.returncode == 1
    assert "not a valid knarr config yet" in proc.stderr and "no sink is configured" in proc.stderr


@pytest.mark.parametrize("content, words", [(None, "cannot read"), ("a: [", "not valid YAML"),
                                            ("- 1\n", "must hold a mapping")])
def test_the_command_exits_2_when_the_input_cannot_be_read(tmp_path, content, words):
    source = tmp_path / "drakkar.yaml"
    if content is not None:
        source.write_text(content)
    proc = _cli(str(source))
    assert proc.returncode == 2
    assert words in proc.stderr
