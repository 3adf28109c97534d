"""Loading the configuration and turning validation failures into messages for people."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from knarr.config.root import _YAML_PATH, CONFIG_PATH_ENV, ENV_DELIMITER, ENV_PREFIX, KnarrConfig
from knarr.errors import ConfigError

__all__ = ["ConfigError", "config_from_dict", "format_validation_error", "load_config"]


# The operator's own settings (KNARR_OPERATOR_RESYNC_SECONDS, ...) are not worker config keys.
RESERVED_ENV_PREFIX = "KNARR_OPERATOR_"


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> KnarrConfig:
    """Load YAML from ``path`` (or ``$KNARR_CONFIG``), deep-merge ``KNARR_*`` env on top, validate.

    Raises :class:`ConfigError` naming each bad key, what was expected and what to do.
    """
    env = os.environ if env is None else env
    if path is None and env.get(CONFIG_PATH_ENV):
        path = env[CONFIG_PATH_ENV]
    yaml_path: Path | None = None
    if path is not None:
        yaml_path = Path(path)
        _check_yaml_file(yaml_path)
    _check_env_keys(env)

    token = _YAML_PATH.set(yaml_path)
    saved = _swap_environ(env)
    try:
        return KnarrConfig()
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, yaml_path)) from None
    finally:
        _swap_environ(saved)
        _YAML_PATH.reset(token)


def config_from_dict(data: Mapping[str, Any]) -> KnarrConfig:
    """Validate a config given as plain data (tests, the operator, the Spark job), no env applied."""
    token = _YAML_PATH.set(None)
    saved = _swap_environ({})
    try:
        return KnarrConfig(**dict(data))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, None)) from None
    finally:
        _swap_environ(saved)
        _YAML_PATH.reset(token)


def _swap_environ(env: Mapping[str, str]) -> dict[str, str]:
    """pydantic-settings reads os.environ; give it exactly the KNARR_* part of ``env``."""
    if env is os.environ:
        return dict(os.environ)
    previous = dict(os.environ)
    for key in [k for k in os.environ if k.upper().startswith(ENV_PREFIX)]:
        del os.environ[key]
    for key, value in env.items():
        if key.upper().startswith(ENV_PREFIX):
            os.environ[key] = value
    return previous


def _check_yaml_file(path: Path) -> None:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; pass --config PATH or set {CONFIG_PATH_ENV}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections (kafka:, executor:, sinks:, ...), not {type(data).__name__}")


def _check_env_keys(env: Mapping[str, str]) -> None:
    """An unknown KNARR_* variable is almost always a typo; say which, instead of ignoring it."""
    problems = []
    for key in env:
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX) or upper == CONFIG_PATH_ENV or upper.startswith(RESERVED_ENV_PREFIX):
            continue
        parts = [p.lower() for p in upper[len(ENV_PREFIX) :].split(ENV_DELIMITER)]
        if not _path_exists(KnarrConfig, parts):
            problems.append(
                f"  {key}: no config key {'.'.join(parts)!r}; env overrides look like "
                f"KNARR_SECTION__KEY (e.g. KNARR_KAFKA__BROKERS)"
            )
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(problems))


def _path_exists(model: type[BaseModel], parts: list[str]) -> bool:
    import typing

    annotation: Any = model
    for part in parts:
        origin = typing.get_origin(annotation)
        if origin in (dict, Mapping):
            annotation = typing.get_args(annotation)[1]
            continue
        if origin is typing.Union or str(origin) == "types.UnionType":
            models = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
            if not models:
                return False
            annotation = models[0]
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return False
        field = annotation.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
    return True


def format_validation_error(exc: ValidationError, yaml_path: Path | None) -> str:
    where = f" in {str(yaml_path)!r} (or its KNARR_* env overrides)" if yaml_path else ""
    lines = [f"invalid configuration{where}:"]
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(root)"
        env_name = ENV_PREFIX + ENV_DELIMITER.join(str(p).upper() for p in err["loc"]) if err["loc"] else ""
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key; check its spelling against the configuration reference"
        elif err["type"] == "missing":
            msg = "required key is missing"
        got = ""
        if "input" in err and err["type"] not in ("missing", "extra_forbidden") and not isinstance(err["input"], dict):
            got = f" (got {err['input']!r})"
        hint = f" [env: {env_name}]" if env_name else ""
        lines.append(f"  {key}: {msg}{got}{hint}")
    return "\n".join(lines)
