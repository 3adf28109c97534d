"""How Redis payloads become SET commands, and which failures mean "later" rather than "never"."""

from __future__ import annotations

import pytest
from redis import exceptions as rex

from knarr import RedisPayload
from knarr.sinks.base import PermanentSinkError
from knarr.sinks.redis import commands, is_transient


def test_each_payload_is_one_set_of_its_prefixed_key_to_its_data_as_json_with_its_ttl():
    planned = commands([RedisPayload(key="user:1", data={"score": 2}, ttl=60), RedisPayload(key="user:2", data="x")], "app:")
    assert planned == [("app:user:1", '{"score":2}', 60), ("app:user:2", '"x"', None)]


@pytest.mark.parametrize("ttl", [0, -5])
def test_a_ttl_below_one_second_is_refused_before_anything_is_sent(ttl):
    with pytest.raises(PermanentSinkError, match=f"key 'app:k': ttl must be at least 1 second .or None: no expiry., got {ttl}"):
        commands([RedisPayload(key="ok", data=1), RedisPayload(key="k", data=1, ttl=ttl)], "app:")


@pytest.mark.parametrize(("error", "transient"), [
    (rex.ConnectionError("Error 111 connecting"), True),
    (rex.TimeoutError("Timeout reading from socket"), True),
    (rex.BusyLoadingError("Redis is loading the dataset in memory"), True),
    (rex.ReadOnlyError("You can't write against a read only replica."), True),
    (rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"), True),
    (TimeoutError(), True),
    (rex.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
    (rex.DataError("Invalid input of type: 'dict'"), False),
])
def test_failures_are_classified_by_what_they_say_about_the_server(error, transient):
    assert is_transient(error) is transient
