"""knarr: consume a Kafka topic, run subprocess tasks per window, deliver results, commit by watermark.

Everything a handler author needs is importable from here::

    import knarr

    class MyHandler(knarr.BaseHandler[MyInput, MyOutput]):
        async def arrange(self, messages, pending): ...
"""

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

__all__ = [
    "BaseHandler",
    "CacheScope",
    "CollectResult",
    "ConfigError",
    "DeliveryAction",
    "DeliveryError",
    "ErrorAction",
    "ExecutorError",
    "ExecutorResult",
    "ExecutorTask",
    "FilePayload",
    "HttpPayload",
    "KafkaPayload",
    "KnarrConfig",
    "MessageGroup",
    "MongoPayload",
    "PendingContext",
    "PluginPayload",
    "PostgresPayload",
    "PrecomputedResult",
    "RedisPayload",
    "SourceMessage",
    "load_config",
    "make_stable_task_id",
    "make_task_id",
    "periodic",
]
