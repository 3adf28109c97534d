"""knarr: consume a Kafka topic, run subprocess tasks per window, deliver results, commit by watermark.

Everything a handler author needs is importable from here::

    import knarr

    class MyHandler(knarr.BaseHandler[MyInput, MyOutput]):
        async def arrange(self, messages, pending): ...

The names load on first use (PEP 562): a task program importing only ``knarr.task`` — at
every start, and at every restart after ``max_tasks_per_process`` — does not pay for the
handler API, pydantic and the config models it never touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from knarr.api.groups import MessageGroup, PendingContext
    from knarr.api.handler import BaseHandler, periodic
    from knarr.api.messages import SourceMessage
    from knarr.api.payloads import (
        CollectResult,
        DeliveryAction,
        DeliveryError,
        FilePayload,
        HttpPayload,
        KafkaPayload,
        MongoPayload,
        PluginPayload,
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
    from knarr.config import ConfigError, KnarrConfig, load_config

__version__ = "0.1.0"

# Public name -> the module it comes from; the TYPE_CHECKING imports above say the same for type checkers.
_SOURCES = {
    "MessageGroup": "knarr.api.groups",
    "PendingContext": "knarr.api.groups",
    "BaseHandler": "knarr.api.handler",
    "periodic": "knarr.api.handler",
    "SourceMessage": "knarr.api.messages",
    "CollectResult": "knarr.api.payloads",
    "DeliveryAction": "knarr.api.payloads",
    "DeliveryError": "knarr.api.payloads",
    "FilePayload": "knarr.api.payloads",
    "HttpPayload": "knarr.api.payloads",
    "KafkaPayload": "knarr.api.payloads",
    "MongoPayload": "knarr.api.payloads",
    "PluginPayload": "knarr.api.payloads",
    "PostgresPayload": "knarr.api.payloads",
    "RedisPayload": "knarr.api.payloads",
    "ErrorAction": "knarr.api.tasks",
    "ExecutorError": "knarr.api.tasks",
    "ExecutorResult": "knarr.api.tasks",
    "ExecutorTask": "knarr.api.tasks",
    "PrecomputedResult": "knarr.api.tasks",
    "make_stable_task_id": "knarr.api.tasks",
    "make_task_id": "knarr.api.tasks",
    "CacheScope": "knarr.cache",
    "ConfigError": "knarr.config",
    "KnarrConfig": "knarr.config",
    "load_config": "knarr.config",
}

__all__ = sorted(_SOURCES)


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'knarr' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value  # once loaded, a plain module attribute: __getattr__ is not asked again
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_SOURCES})
