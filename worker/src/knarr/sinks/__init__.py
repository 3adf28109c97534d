"""Sinks: where hook outputs go (Kafka, files, ...), and the dead-letter queue."""

from __future__ import annotations

from knarr.config.loading import ConfigError
from knarr.config.root import KnarrConfig
from knarr.sinks.base import Sink, SinkConnectError
from knarr.sinks.filesystem import FileSink
from knarr.sinks.kafka import KafkaSink
from knarr.sinks.resolution import SinkResolutionError, resolve_sink

__all__ = ["Sink", "SinkConnectError", "SinkResolutionError", "build_sinks", "resolve_sink"]


class SinkNotSupportedError(ConfigError):
    """A configured sink type has no implementation in this version."""


def build_sinks(config: KnarrConfig) -> list[Sink]:
    """One sink object per configured instance."""
    sinks: list[Sink] = []
    for sink_type, name, cfg in config.sinks.instances():
        if sink_type == "kafka":
            sinks.append(KafkaSink(name, cfg, config.kafka.brokers, config.kafka.startup_timeout_seconds))  # type: ignore[arg-type]
        elif sink_type == "filesystem":
            sinks.append(FileSink(name, cfg))  # type: ignore[arg-type]
        else:
            raise SinkNotSupportedError(
                f"sinks.{sink_type}.{name}: the {sink_type} sink is not available in this knarr version "
                "(kafka and filesystem are); remove it or upgrade"
            )
    return sinks
