"""The worker's config file, rendered from a Pipeline and validated by the worker itself.

A Pipeline the worker would reject must surface as a status condition on the
Pipeline, not as a crash-looping pod: so the operator runs the worker's own
``config_from_dict`` before anything is rendered.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from knarr.config import ConfigError, KnarrConfig, config_from_dict
from knarr.config.environment import ENV_PREFIX, deep_merge, env_overrides

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


def render_worker_config(worker_spec: Mapping[str, Any], env: Iterable[Mapping[str, Any]] = ()) -> WorkerConfig:
    """camelCase spec sections → the worker's snake_case config, credentials split off, validated.

    ``env`` is the Pipeline's ``spec.env``: its ``KNARR_*`` entries override the file in the
    worker, so the config validated here is the file with them merged over it, as the worker
    merges them (a value from a Secret or ConfigMap is unknown here: only its name is checked).
    """
    data = to_snake(KnarrConfig, copy.deepcopy(dict(worker_spec)))
    try:
        secrets = split_off_secrets(data)
    except CredentialError as exc:
        raise InvalidConfig(f"credentials (keys under spec):\n{exc}") from None
    candidate = copy.deepcopy(data)
    for ref in secrets:
        _set_path(candidate, list(ref.path), _placeholder(ref))
    candidate = _with_env_overrides(candidate, list(env))
    _check_debug_token(candidate)
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
    debug = validated.debug
    if debug.enabled and debug.port == 0:
        raise InvalidConfig(
            "debug.port 0: the operator exposes the debug UI on a port of its own (a container port and a Service), "
            "so it must be a fixed port"
        )
    return WorkerConfig(data=data, secrets=tuple(secrets), validated=validated)


def _check_debug_token(candidate: Mapping[str, Any]) -> None:
    """A debug UI other pods can reach needs a bearer token, and on a Pipeline it comes from a Secret.

    The worker refuses this too; the operator says it in the Pipeline's own terms.
    """
    debug = candidate.get("debug") or {}
    host = str(debug.get("host", "127.0.0.1"))
    if debug.get("enabled") is True and not debug.get("token") and not _is_loopback(host):
        raise InvalidConfig(
            f"debug.host {host!r} makes the debug UI reachable from other pods, but debug.token is not set: set "
            "spec.debug.token to {valueFrom: {secretKeyRef: {name: <secret>, key: <key>}}} (every request must then "
            "carry it as a bearer token), or keep debug.host at 127.0.0.1 and reach the UI with kubectl port-forward"
        )


# A credential's stand-in while validating: shaped like the real thing, for code that parses it.
_PLACEHOLDER_SCHEMES = {"postgres": "postgresql", "mongo": "mongodb", "redis": "redis", "http": "https"}


def _placeholder(ref: SecretRef) -> str:
    if ref.path[0] == "sinks" and len(ref.path) == 4 and ref.path[1] in _PLACEHOLDER_SCHEMES:
        return f"{_PLACEHOLDER_SCHEMES[ref.path[1]]}://{ref.secret}.from-secret.invalid/{ref.key}"
    return f"<from secret {ref.secret}/{ref.key}>"


def _with_env_overrides(data: dict[str, Any], env: list[Mapping[str, Any]]) -> dict[str, Any]:
    """``data`` with the ``KNARR_*`` entries of ``env`` merged over it by the worker's own rules."""
    ours = [e for e in env if str(e.get("name", "")).upper().startswith(ENV_PREFIX)]
    literal = {str(e["name"]): str(e.get("value", "")) for e in ours if "valueFrom" not in e}
    referenced = {str(e["name"]): "null" for e in ours if "valueFrom" in e}  # only the name can be judged
    overrides, problems = env_overrides(KnarrConfig, literal, data)
    problems += env_overrides(KnarrConfig, referenced, data)[1]
    if problems:
        raise InvalidConfig("spec.env: the worker takes KNARR_* variables as overrides of its config, and would reject these:\n"
                            + "\n".join(problems))
    return deep_merge(data, overrides)


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
