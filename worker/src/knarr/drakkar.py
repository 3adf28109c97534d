"""Drakkar's handler API under its own names, for handlers moving over from Drakkar.

Change ``import drakkar as dk`` to ``from knarr import drakkar as dk`` and the handler runs on
knarr (with the config from ``knarr migrate-config``). Every name here is knarr's own
implementation; a Drakkar name knarr does not have raises an AttributeError saying what to use
instead. docs/migrating-from-drakkar.md lists them all.
"""

from __future__ import annotations

from typing import Any

from knarr.api.groups import MessageGroup, PendingContext
from knarr.api.handler import BaseHandler
from knarr.api.handler import periodic as periodic
from knarr.api.messages import SourceMessage
from knarr.api.payloads import (
    CollectResult,
    DeliveryAction,
    DeliveryError,
    FilePayload,
    HttpPayload,
    KafkaPayload,
    MongoPayload,
    PostgresPayload,
    RedisPayload,
)
from knarr.api.tasks import (
    ErrorAction,
    ExecutorError,
    ExecutorResult,
    ExecutorTask,
    PrecomputedResult,
    make_stable_task_id,
    make_task_id,
)
from knarr.cache import CacheScope
from knarr.config import KnarrConfig as DrakkarConfig
from knarr.config import load_config

BaseDrakkarHandler = BaseHandler

# Drakkar names knarr has no equivalent for, and what to do instead.
NOT_IN_KNARR = {
    "DrakkarApp": "knarr runs a handler with `knarr run --config knarr.yaml --handler module:Class`",
    "DrakkarHandler": "subclass BaseDrakkarHandler (knarr's BaseHandler)",
    "CustomPayload": "port the custom sink as a knarr plug-in sink and return PluginPayload (docs/plugins.md)",
    "PostgresOp": "knarr's PostgresPayload inserts rows; other operations are not supported yet",
    "RedisOp": "knarr's RedisPayload sets a key; other operations are not supported yet",
    "MessageParseError": "knarr sets msg.parse_error and applies source.on_parse_error",
    "ParseFailurePayload": "unparsable messages follow source.on_parse_error (arrange, dlq or skip)",
    "SinkDeliveryFailedError": "knarr hands delivery failures to on_delivery_error",
    "TaskOrigin": "knarr tasks always come from the source topic",
    "WebAppConfig": "knarr has no HTTP source",
    "WebClientConfig": "knarr has no HTTP source",
    "WebReport": "knarr has no HTTP source",
    "WebRequestContext": "knarr has no HTTP source",
    "SinkDeliverySummary": "knarr has no HTTP source",
    "make_request_id": "knarr has no HTTP source",
    "KafkaSourceConfig": "the source topic is configured under kafka: in knarr's config",
    "SourcesConfig": "the source is configured under kafka: and source: in knarr's config",
    "CacheLike": "type self.cache as knarr.cache.handler_cache.HandlerCache",
    "AnnotatorLike": "knarr's flight recorder keeps the engine's own events; handlers cannot annotate them",
    "TimelineEventEmitter": "knarr's debug UI timeline shows the engine's events; handlers cannot add their own",
    "NoOpTimelineEventEmitter": "knarr's debug UI timeline shows the engine's events; handlers cannot add "
                                "their own",
    "TimelineMatch": "knarr's debug UI timeline filters by kind, partition, offset or task; it has no match rules",
    "probe_field": "knarr's message probe (knarr probe, or the debug UI's) reports every task and hook of a "
                   "message; it has no per-field markers",
    "load_app_config": "put application settings in your own config; knarr has no app: section",
    "format_rfc3339_micro": "use datetime.isoformat(timespec='microseconds')",
}


def __getattr__(name: str) -> Any:
    hint = NOT_IN_KNARR.get(name)
    if hint is not None:
        raise AttributeError(f"knarr has no drakkar.{name}: {hint} (see docs/migrating-from-drakkar.md)")
    raise AttributeError(f"module 'knarr.drakkar' has no attribute {name!r}")


__all__ = [
    "BaseDrakkarHandler",
    "CacheScope",
    "CollectResult",
    "DeliveryAction",
    "DeliveryError",
    "DrakkarConfig",
    "ErrorAction",
    "ExecutorError",
    "ExecutorResult",
    "ExecutorTask",
    "FilePayload",
    "HttpPayload",
    "KafkaPayload",
    "MessageGroup",
    "MongoPayload",
    "PendingContext",
    "PostgresPayload",
    "PrecomputedResult",
    "RedisPayload",
    "SourceMessage",
    "load_config",
    "make_stable_task_id",
    "make_task_id",
    "periodic",
]
