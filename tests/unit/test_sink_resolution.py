"""Which sink a payload's ``sink`` name resolves to."""

import pytest

from knarr.sinks.resolution import SinkResolutionError, resolve_sink


def test_an_empty_name_means_the_only_sink_of_that_type():
    assert resolve_sink("kafka", "", ["results"]) == "results"


def test_a_named_sink_resolves_to_itself():
    assert resolve_sink("kafka", "b", ["a", "b"]) == "b"


def test_an_empty_name_with_several_sinks_is_ambiguous_and_lists_them():
    with pytest.raises(SinkResolutionError, match=r"2 kafka sinks are configured \(a, b\)"):
        resolve_sink("kafka", "", ["a", "b"])


def test_an_unknown_name_is_an_error_naming_the_configured_sinks():
    with pytest.raises(SinkResolutionError, match=r"names sink 'nope'.*configured kafka sinks are: a, b"):
        resolve_sink("kafka", "nope", ["b", "a"])


def test_a_payload_for_an_unconfigured_type_says_how_to_add_one():
    with pytest.raises(SinkResolutionError, match=r"no filesystem sink is configured; add one under sinks.filesystem"):
        resolve_sink("filesystem", "", [])


def test_every_collect_result_field_names_its_sink_type_in_order():
    from knarr.api.payloads import SINK_TYPES, CollectResult

    assert list(SINK_TYPES) == list(CollectResult.model_fields)
    assert SINK_TYPES["files"] == "filesystem"



class _Sink:
    def __init__(self, sink_type: str, name: str) -> None:
        self.sink_type, self.name = sink_type, name


def test_a_plan_takes_each_non_empty_payload_list_to_its_sink_in_field_order():
    from knarr.api.handler import BaseHandler
    from knarr.api.payloads import CollectResult, FilePayload, KafkaPayload, RedisPayload
    from knarr.sinks.delivery import SinkManager

    class WithMore(CollectResult):
        note: str = "not a payload list"

    kafka, files, redis = _Sink("kafka", "out"), _Sink("filesystem", "disk"), _Sink("redis", "cache")
    manager = SinkManager([kafka, files, redis], None, BaseHandler())
    collect = WithMore(files=[FilePayload(path="/tmp/x", data="a")], kafka=[KafkaPayload(data={"n": 1})], redis=[])
    assert manager.plan(collect) == [(kafka, collect.kafka), (files, collect.files)]
    collect.redis = [RedisPayload(key="k", data="v")]  # set after it was made: read all the same
    assert manager.plan(collect) == [(kafka, collect.kafka), (redis, collect.redis), (files, collect.files)]
    assert manager.plan(CollectResult()) == []
