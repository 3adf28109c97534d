"""Configuration: the pydantic models (single source of truth) and their loading."""

from knarr.config.loading import ConfigError, config_from_dict, load_config
from knarr.config.models import (
    DlqConfig,
    ExecutorConfig,
    FileSinkConfig,
    HttpSinkConfig,
    KafkaConfig,
    KafkaSinkConfig,
    LocalSourceConfig,
    LoggingConfig,
    MetricsConfig,
    MongoSinkConfig,
    PostgresSinkConfig,
    RedisSinkConfig,
    SinksConfig,
    SinkType,
    SourceConfig,
)
from knarr.config.root import KnarrConfig, dump_config

__all__ = [
    "ConfigError",
    "DlqConfig",
    "ExecutorConfig",
    "FileSinkConfig",
    "HttpSinkConfig",
    "KafkaConfig",
    "KafkaSinkConfig",
    "KnarrConfig",
    "LocalSourceConfig",
    "LoggingConfig",
    "MetricsConfig",
    "MongoSinkConfig",
    "PostgresSinkConfig",
    "RedisSinkConfig",
    "SinkType",
    "SinksConfig",
    "SourceConfig",
    "config_from_dict",
    "dump_config",
    "load_config",
]
