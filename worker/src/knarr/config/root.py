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

    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    source: SourceConfig = Field(default_factory=SourceConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    sinks: SinksConfig = Field(default_factory=SinksConfig)
    dlq: DlqConfig = Field(default_factory=DlqConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
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
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_path))
        return tuple(sources)


# The YAML path travels to settings_customise_sources through a context variable,
# because pydantic-settings builds its sources from the class, not the instance.
import contextvars  # noqa: E402

_YAML_PATH: contextvars.ContextVar[Path | None] = contextvars.ContextVar("knarr_yaml_path", default=None)


def dump_config(config: KnarrConfig) -> dict[str, Any]:
    """The config as plain data, the shape a YAML file would have."""
    return config.model_dump(mode="json")
