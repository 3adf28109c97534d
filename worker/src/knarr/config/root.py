"""The configuration root, ``KnarrConfig``, and how it is loaded (YAML, then ``KNARR_*`` env on top)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from knarr.config.models import (
    DlqConfig,
    ExecutorConfig,
    KafkaConfig,
    LoggingConfig,
    MetricsConfig,
    SinksConfig,
    SourceConfig,
)
from knarr.config.paths import HandlerSpec, resolve_paths

ENV_PREFIX = "KNARR_"
ENV_DELIMITER = "__"
CONFIG_PATH_ENV = "KNARR_CONFIG"


class KnarrConfig(BaseSettings):
    """Everything a worker needs. Load it with :func:`knarr.config.load_config`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        extra="forbid",
        validate_assignment=True,
        nested_model_default_partial_update=True,
    )

    kafka: KafkaConfig = Field(default_factory=KafkaConfig, description="The source topic, its brokers and the consumer group.")
    source: SourceConfig = Field(default_factory=SourceConfig, description="Kafka (the default) or a local JSONL file.")
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig, description="How tasks run: the subprocess pool, windows, retries, backpressure.")
    sinks: SinksConfig = Field(default_factory=SinksConfig, description="Where hook outputs go: named sinks per type (at least one).")
    dlq: DlqConfig = Field(default_factory=DlqConfig, description="Where failed deliveries and unprocessable windows go.")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="The /metrics, /healthz and /readyz server.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Log level and format.")
    handler: HandlerSpec = Field(
        "",
        description="The handler class, 'package.module:Class' or 'path/to/file.py:Class' (a file is relative "
        "to the config file); the --handler option overrides it.",
    )
    worker_name_env: str = Field("WORKER_ID", description="Environment variable holding this worker's name.")
    cluster_name: str = Field("", description="Logical cluster name, bound to every log line.")
    cluster_name_env: str = Field("", description="Environment variable that overrides cluster_name when set.")

    # Where the YAML comes from is decided by load_config(); it is not a config key.
    _yaml_path: str | None = None

    @model_validator(mode="after")
    def _at_least_one_sink(self) -> KnarrConfig:
        if self.sinks.is_empty:
            raise ValueError(
                "no sink is configured; add at least one under 'sinks', e.g. "
                "sinks: {filesystem: {out: {base_path: ./out}}}"
            )
        return self

    @property
    def dlq_topic(self) -> str:
        return self.dlq.topic or f"{self.kafka.source_topic}_dlq"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Earlier sources win: explicit arguments, then KNARR_* env, then the YAML file.
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        yaml_path = _YAML_PATH.get()
        if yaml_path is not None:
            sources.append(_YamlRelativeToFile(settings_cls, yaml_file=yaml_path))
        return tuple(sources)


class _YamlRelativeToFile(YamlConfigSettingsSource):
    """The YAML file, with its relative paths made relative to the file's own directory."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        data = super()._read_file(file_path)
        return resolve_paths(KnarrConfig, data, Path(file_path).resolve().parent)


# The YAML path travels to settings_customise_sources through a context variable,
# because pydantic-settings builds its sources from the class, not the instance.
import contextvars  # noqa: E402

_YAML_PATH: contextvars.ContextVar[Path | None] = contextvars.ContextVar("knarr_yaml_path", default=None)


def dump_config(config: KnarrConfig) -> dict[str, Any]:
    """The config as plain data, the shape a YAML file would have."""
    return config.model_dump(mode="json")
