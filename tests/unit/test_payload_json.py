"""How a payload's data is written as JSON for the sinks that take text (Kafka, HTTP, Redis, files, the DLQ)."""

from __future__ import annotations

import datetime
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knarr.api.payloads import KafkaPayload

_SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text()
            | st.datetimes() | st.decimals(allow_nan=False))
_DATA = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                     | st.dictionaries(st.text() | st.integers(), inner, max_size=4), max_leaves=12)


def as_json_dumps(data: object) -> str:
    return json.dumps(data, default=str, separators=(",", ":"))


@given(_DATA)
def test_plain_data_is_written_as_json_dumps_writes_it_with_str_for_what_json_cannot_hold(data):
    assert KafkaPayload(data=data).data_json() == as_json_dumps(data)


def test_a_date_is_written_as_its_str_and_text_outside_ascii_is_escaped():
    when = datetime.datetime(2026, 11, 29, 4, 30)
    assert KafkaPayload(data={"at": when, "name": "Åse"}).data_json() == '{"at":"2026-11-29 04:30:00","name":"\\u00c5se"}'


def test_data_that_contains_itself_is_refused_each_time_and_other_data_still_writes():
    looped: list = []
    looped.append(looped)
    for _ in range(2):
        with pytest.raises(ValueError, match="Circular reference"):
            KafkaPayload(data={"a": looped}).data_json()
    assert KafkaPayload(data={"a": [1]}).data_json() == '{"a":[1]}'
