"""What flows out: payloads for sinks, grouped in a CollectResult; delivery failures."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# What json.dumps(data, default=str, separators=(",", ":")) builds on every call, made once.
_JSON = json.JSONEncoder(default=str, separators=(",", ":"))


def _c_encode() -> Callable[[Any], str]:
    """``_JSON.encode``, calling json's C encoder the way its ``iterencode`` does rather than through
    ``encode`` and ``iterencode`` themselves (about 90 bytecodes per record of a Kafka sink; the C
    encoder does the work either way). Each call gets its own circular-reference markers, as there.
    Where this Python's json has no C encoder, or it writes a sample differently, ``_JSON.encode``."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _JSON.encode
    escape = json.encoder.encode_basestring_ascii

    def encode(data: Any) -> str:
        return "".join(make({}, str, escape, None, ":", ",", False, False, True)(data, 0))

    sample = {"a": [1, 2.5, None, True, "é\n\"", {"b": object}], "c": {1: float("nan")}, "d": ()}
    try:
        return encode if encode(sample) == _JSON.encode(sample) and encode("x") == _JSON.encode("x") else _JSON.encode
    except Exception:
        return _JSON.encode


_encode_json = _c_encode()


class _Payload(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    sink: str = Field("", description="Sink instance name; empty means the only one of its type.")
    data: Any

    def data_json(self) -> str:
        """The payload's data as one JSON document (models via model_dump_json, plain data via json)."""
        if isinstance(self.data, BaseModel):
            return self.data.model_dump_json()
        if isinstance(self.data, (bytes, bytearray)):
            return self.data.decode()
        return _encode_json(self.data)

    def data_dict(self) -> Any:
        if isinstance(self.data, BaseModel):
            return self.data.model_dump(mode="json")
        return self.data


class KafkaPayload(_Payload):
    key: bytes | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class FilePayload(_Payload):
    path: str


class PostgresPayload(_Payload):
    table: str
    on_conflict: list[str] = Field(
        default_factory=list,
        description="Columns of a unique key, for an upsert: a row whose key exists updates that row's other "
        "columns instead of failing (when every column is a key column, the new row is dropped). Empty: plain insert.",
    )


class MongoPayload(_Payload):
    collection: str
    upsert_keys: list[str] = Field(
        default_factory=list,
        description="Fields that identify the document: when set, a document with the same values is replaced "
                    "(or inserted when there is none) instead of a new one added.",
    )


class HttpPayload(_Payload):
    pass


class RedisPayload(_Payload):
    key: str
    ttl: int | None = None


class PluginPayload(_Payload):
    """A payload for a plug-in sink (``sinks.plugin.<name>``); ``sink`` names the instance, empty: the only one."""

    meta: dict[str, Any] = Field(default_factory=dict, description="Anything else the plug-in wants with the data.")


class CollectResult(BaseModel):
    """Everything a hook wants delivered, by sink type."""

    kafka: list[KafkaPayload] = Field(default_factory=list)
    postgres: list[PostgresPayload] = Field(default_factory=list)
    mongo: list[MongoPayload] = Field(default_factory=list)
    http: list[HttpPayload] = Field(default_factory=list)
    redis: list[RedisPayload] = Field(default_factory=list)
    files: list[FilePayload] = Field(default_factory=list)
    plugin: list[PluginPayload] = Field(default_factory=list)

    @property
    def has_outputs(self) -> bool:
        return bool(self.kafka or self.postgres or self.mongo or self.http or self.redis or self.files or self.plugin)

    def by_sink_type(self) -> list[tuple[str, list[_Payload]]]:
        """Payload lists keyed by the sink type they go to (``files`` go to ``filesystem``)."""
        return [(sink_type, getattr(self, name)) for name, sink_type in SINK_TYPES.items()]

    @property
    def count(self) -> int:
        return sum(len(p) for _, p in self.by_sink_type())


# A CollectResult field -> its payload class (a DLQ record names the field, so a replay can rebuild the payload).
PAYLOAD_KINDS: dict[str, type[_Payload]] = {
    "kafka": KafkaPayload, "postgres": PostgresPayload, "mongo": MongoPayload, "http": HttpPayload,
    "redis": RedisPayload, "files": FilePayload, "plugin": PluginPayload,
}
# Every CollectResult field -> the kind of sink its payloads go to, in the fields' order (each field's
# own name but ``files``; every plug-in type is of kind "plugin"); and back.
SINK_TYPES: dict[str, str] = {name: "filesystem" if name == "files" else name for name in PAYLOAD_KINDS}
FIELD_OF_SINK_TYPE: dict[str, str] = {sink_type: name for name, sink_type in SINK_TYPES.items()}


def payload_kind(payload: Any) -> str:
    """The CollectResult field a payload object belongs in ("" for anything else)."""
    for kind, cls in PAYLOAD_KINDS.items():
        if type(payload) is cls:
            return kind
    return ""


class DeliveryAction(str, enum.Enum):
    """What ``on_delivery_error`` may return."""

    RETRY = "retry"
    SKIP = "skip"
    DLQ = "dlq"


class DeliveryError(BaseModel):
    """A sink delivery that failed, handed to ``on_delivery_error``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    sink_name: str
    sink_type: str
    error: str
    payloads: list[Any]
    attempt: int = 1
    partition: int | None = None
    offsets: list[int] = Field(default_factory=list)  # the source messages the payloads derive from
    keys: list[bytes | None] = Field(default_factory=list)
    task: dict[str, Any] | None = None  # what a task that failed for good was (never its env or stdin)
