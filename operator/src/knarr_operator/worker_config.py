"""The worker's config file, rendered from a Pipeline and validated by the worker itself.

A Pipeline the worker would reject must surface as a status condition on the
Pipeline, not as a crash-looping pod: so the operator runs the worker's own
``config_from_dict`` before anything is rendered.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from knarr.config import ConfigError, KnarrConfig, config_from_dict

from knarr_operator.credentials import CredentialError, SecretRef, split_off_secrets
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
    try:
        secrets = split_off_secrets(data)
    except CredentialError as exc:
        raise InvalidConfig(f"credentials (keys under spec):\n{exc}") from None
    candidate = copy.deepcopy(data)
    for ref in secrets:
        _set_path(candidate, list(ref.path), f"<from secret {ref.secret}/{ref.key}>")
    try:
        validated = config_from_dict(candidate)
    except ConfigError as exc:
        raise InvalidConfig(_as_spec_paths(str(exc))) from None
    if not validated.metrics.enabled or validated.metrics.port == 0:
        raise InvalidConfig(
            "metrics: the operator probes /healthz and /readyz on the metrics port, so "
            "metrics.enabled must be true and metrics.port a fixed port (not 0)"
        )
    if any(key.strip().lower() == "group.instance.id" for key in validated.kafka.extra):
        raise InvalidConfig(
            "kafka.extra.group.instance.id: every worker of a Pipeline reads the same config, so all would claim "
            "one static member id and the broker would fence all but one; leave it out"
        )
    if _is_loopback(validated.metrics.host):
        raise InvalidConfig(
            f"metrics.host {validated.metrics.host!r}: the kubelet probes the pod's IP, which a loopback address "
            f"never answers; use 0.0.0.0 (or :: on IPv6 clusters)"
        )
    return WorkerConfig(data=data, secrets=tuple(secrets), validated=validated)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def _set_path(data: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        data = data.setdefault(part, {})
    data[path[-1]] = value


def _as_spec_paths(message: str) -> str:
    """The worker's message names config keys; on a Pipeline they live under spec."""
    return message.replace("invalid configuration:", "the worker would reject this configuration (keys under spec):", 1)
