"""kafka.extra: properties that would undo knarr's commits are refused by name; librdkafka judges the rest at startup."""

from __future__ import annotations

import pytest

from knarr.config import ConfigError, config_from_dict
from knarr.config.librdkafka import ConsumerSettingsError, check_consumer_settings

SINK = {"filesystem": {"out": {"base_path": "/tmp/knarr-out"}}}


def with_extra(extra: dict) -> dict:
    return {"kafka": {"extra": extra}, "sinks": SINK}


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("enable.auto.commit", True, "auto-commit would commit offsets of messages whose tasks are still running"),
        ("auto.commit.enable", "true", "legacy alias of enable.auto.commit"),
        ("enable.auto.offset.store", True, "knarr commits explicit offsets"),
        ("auto.commit.interval.ms", 1000, "commits by watermark"),
        ("offset.store.method", "file", "committed to the group on the broker"),
        ("group.protocol", "consumer", "classic protocol's cooperative rebalance"),
        ("partition.assignment.strategy", "range", "drains only the partitions a rebalance moves"),
        ("group.id", "other", "use kafka.consumer_group"),
        ("bootstrap.servers", "b:9092", "use kafka.brokers"),
        ("session.timeout.ms", 10_000, "use kafka.session_timeout_ms"),
    ],
)
def test_a_consumer_property_that_breaks_commits_or_rebalances_is_refused_naming_it(key, value, reason):
    with pytest.raises(ConfigError) as err:
        config_from_dict(with_extra({key: value}))
    text = str(err.value)
    assert f"kafka.extra: {key!r} may not be set here" in text
    assert reason in text


def test_a_refused_property_is_refused_whatever_its_case():
    with pytest.raises(ConfigError, match="'Enable.Auto.Commit' may not be set here"):
        config_from_dict(with_extra({"Enable.Auto.Commit": False}))


def test_connection_tuning_and_static_membership_properties_pass_through():
    extra = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "fetch.max.bytes": 1_048_576, "client.rack": "a",
             "group.instance.id": "worker-1"}
    assert config_from_dict(with_extra(extra)).kafka.extra == extra


def test_a_sink_producer_with_acks_0_is_refused_because_lost_results_would_be_committed():
    with pytest.raises(ConfigError, match=r"sinks\.kafka\.out\.extra: 'acks' may not be set here: acks=0 never learns"):
        config_from_dict({"sinks": {"kafka": {"out": {"topic": "t", "extra": {"acks": 0}}}}})


def test_a_sink_producer_may_set_acks_all():
    cfg = config_from_dict({"sinks": {"kafka": {"out": {"topic": "t", "extra": {"acks": "all"}}}}})
    assert cfg.sinks.kafka["out"].extra == {"acks": "all"}


# --- librdkafka's own verdict, asked at startup (a client is made, no connection) ----------------

BASE = {"group.id": "g", "bootstrap.servers": "127.0.0.1:1", "enable.auto.commit": False,
        "partition.assignment.strategy": "cooperative-sticky"}


def test_settings_the_kafka_client_accepts_pass():
    check_consumer_settings({**BASE, "fetch.max.bytes": 1_048_576, "session.timeout.ms": 45_000}, max_poll_records=500)


def test_an_unknown_property_names_its_config_key():
    with pytest.raises(ConsumerSettingsError) as err:
        check_consumer_settings({**BASE, "fetch.max.byte": 1}, max_poll_records=100)
    assert str(err.value) == (
        'kafka.extra.fetch.max.byte: the Kafka client (librdkafka) refuses these consumer settings: '
        'No such configuration property: "fetch.max.byte"'
    )


def test_a_relation_the_kafka_client_enforces_names_both_keys():
    with pytest.raises(ConsumerSettingsError) as err:
        check_consumer_settings({**BASE, "fetch.max.bytes": 1_000, "message.max.bytes": 100_000}, max_poll_records=100)
    assert str(err.value).startswith("kafka.extra.fetch.max.bytes, kafka.extra.message.max.bytes: the Kafka client")
    assert "`fetch.max.bytes` must be >= `message.max.bytes`" in str(err.value)


def test_a_timeout_out_of_the_kafka_clients_range_names_the_knarr_key():
    with pytest.raises(ConsumerSettingsError, match=r"^kafka\.max_poll_interval_ms: .*outside allowed range 1\.\.86400000"):
        check_consumer_settings({**BASE, "max.poll.interval.ms": 86_400_001}, max_poll_records=100)


def test_a_poll_batch_larger_than_the_client_takes_names_max_poll_records():
    with pytest.raises(ConsumerSettingsError, match=r"^kafka\.max_poll_records: 2000000 is more than the Kafka client takes in one poll"):
        check_consumer_settings(BASE, max_poll_records=2_000_000)


def test_a_refusal_never_shows_a_secret_value():
    settings = {**BASE, "security.protocol": "SASL_SSL", "sasl.mechanism": "hunter2-mech", "sasl.password": "hunter2"}
    with pytest.raises(ConsumerSettingsError) as err:
        check_consumer_settings(settings, max_poll_records=100)
    assert str(err.value) == "kafka.extra: the Kafka client (librdkafka) refuses these consumer settings: Unsupported SASL mechanism: ***"


def test_an_unreadable_key_file_names_its_key():
    settings = {**BASE, "security.protocol": "SSL", "ssl.key.location": "/nonexistent/client.key", "ssl.key.password": "hunter2"}
    with pytest.raises(ConsumerSettingsError) as err:
        check_consumer_settings(settings, max_poll_records=100)
    assert str(err.value).startswith("kafka.extra.ssl.key.location: the Kafka client (librdkafka) refuses")
    assert "hunter2" not in str(err.value)
