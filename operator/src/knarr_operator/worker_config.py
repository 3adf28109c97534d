"""The worker's config file, rendered from a Pipeline and validated by the worker itself.

A Pipeline the worker would reject must surface as a status condition on the
Pipeline, not as a crash-looping pod: so the operator runs the worker's own
``config_from_dict`` before anything is rendered.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from knarr.config import ConfigError, KnarrConfig, config_from_dict

from knarr_operator.credentials import SECRET_FIELDS_BY_SINK_TYPE, SecretRef, secret_ref
from knarr_operator.naming import to_snake

CONFIG_DIR = "/etc/knarr"
CONFIG_PATH = f"{CONFIG_DIR}/config.yaml"
CONFIG_KEY = "config.yaml"


class InvalidConfig(ValueError):
    """The worker would refuse this configuration; the message says which key and why."""


@dataclass(frozen=True)
class WorkerConfig:
    data: dict[str, Any]  # the config file's content: the user's keys, snake_case, without credentials
    secrets: tuple[SecretRef, ...]  # credentials, passed as env overrides
    validated: KnarrConfig  # with placeholders for the credentials

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.data, sort_keys=True)


def render_worker_config(worker_spec: Mapping[str, Any]) -> WorkerConfig:
    """camelCase spec sections → the worker's snake_case config, credentials split off, validated."""
    data = to_snake(KnarrConfig, copy.deepcopy(dict(worker_spec)))
    secrets = _split_off_secrets(data)
    candidate = copy.deepcopy(data)
    for ref in secrets:
        _set_path(candidate, ref.config_path.split("."), f"<from secret {ref.secret}/{ref.key}>")
    try:
        validated = config_from_dict(candidate)
    except ConfigError as exc:
        raise InvalidConfig(_as_spec_paths(str(exc))) from None
    if not validated.metrics.enabled or validated.metrics.port == 0:
        raise InvalidConfig(
            "metrics: the operator probes /healthz and /readyz on the metrics port, so "
            "metrics.enabled must be true and metrics.port a fixed port (not 0)"
        )
    return WorkerConfig(data=data, secrets=tuple(secrets), validated=validated)


def _split_off_secrets(data: dict[str, Any]) -> list[SecretRef]:
    refs: list[SecretRef] = []
    sinks = data.get("sinks") or {}
    for sink_type, fields in SECRET_FIELDS_BY_SINK_TYPE.items():
        for name, sink in (sinks.get(sink_type) or {}).items():
            if not isinstance(sink, dict):
                continue
            for field in sorted(fields):
                ref = secret_ref(sink.get(field))
                if ref is None:
                    continue
                if name != name.lower():
                    raise InvalidConfig(
                        f"sinks.{sink_type}.{name}.{field}: a sink whose {field} comes from a Secret needs a "
                        f"lower-case name (the worker reads it from env KNARR_SINKS__{sink_type.upper()}__"
                        f"{name.upper()}__{field.upper()}, and env names carry no case); rename the sink"
                    )
                del sink[field]
                refs.append(
                    SecretRef(
                        env_name=f"KNARR_SINKS__{sink_type.upper()}__{name.upper()}__{field.upper()}",
                        secret=ref[0],
                        key=ref[1],
                        config_path=f"sinks.{sink_type}.{name}.{field}",
                    )
                )
    return refs


def _set_path(data: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        data = data.setdefault(part, {})
    data[path[-1]] = value


def _as_spec_paths(message: str) -> str:
    """The worker's message names config keys; on a Pipeline they live under spec."""
    return message.replace("invalid configuration:", "the worker would reject this configuration (keys under spec):", 1)
