"""Which class implements each sink type: the built-in ones, and plug-ins.

Sink modules are imported only when a sink of their type is configured, so a worker with a
Kafka sink never loads a database driver.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from knarr.config.root import KnarrConfig
from knarr.errors import ConfigError
from knarr.sinks.base import Sink

# sink type -> "module:factory"; a factory takes (name, sink config, whole config) and returns a Sink.
BUILTIN: dict[str, str] = {
    "kafka": "knarr.sinks.kafka:KafkaSink.from_config",
    "filesystem": "knarr.sinks.filesystem:FileSink.from_config",
    "postgres": "knarr.sinks.postgres:PostgresSink.from_config",
    "redis": "knarr.sinks.redis:RedisSink.from_config",
    "mongo": "knarr.sinks.mongo:MongoSink.from_config",
    "http": "knarr.sinks.http:HttpSink.from_config",
}


class SinkNotSupportedError(ConfigError):
    """A configured sink type has no implementation here."""


def _load(target: str) -> Callable[[str, Any, KnarrConfig], Sink]:
    module, _, attribute = target.partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def build_sinks(config: KnarrConfig) -> list[Sink]:
    """One sink object per configured instance (nothing connects yet)."""
    sinks: list[Sink] = []
    for sink_type, name, cfg in config.sinks.instances():
        if sink_type == "plugin":
            from knarr.sinks import plugins

            sinks.append(plugins.build(name, cfg, config))  # type: ignore[arg-type]
            continue
        target = BUILTIN.get(sink_type)
        if target is None:
            raise SinkNotSupportedError(
                f"sinks.{sink_type}.{name}: this knarr version has no {sink_type} sink "
                f"(it has: {', '.join(sorted(BUILTIN))}, and plug-ins under sinks.plugin); remove it or upgrade knarr"
            )
        sinks.append(_load(target)(name, cfg, config))
    return sinks
