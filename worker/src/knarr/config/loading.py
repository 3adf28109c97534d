"""Loading the configuration and turning validation failures into messages for people."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from knarr.config.environment import CONFIG_PATH_ENV, deep_merge, env_name, env_overrides, not_config_env
from knarr.config.paths import resolve_paths
from knarr.config.root import KnarrConfig
from knarr.config.secrets import has_credentials, is_masked
from knarr.errors import ConfigError

__all__ = ["ConfigError", "config_from_dict", "format_validation_error", "load_config"]

_log = logging.getLogger(__name__)
# KNARR_* variables already said to be left alone: a process loading its config again says nothing new.
_reported_not_config: set[str] = set()


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
                plugins: bool = True) -> KnarrConfig:
    """Load YAML from ``path`` (or ``$KNARR_CONFIG``), deep-merge ``KNARR_*`` env on top, validate.

    ``plugins``: also check the plug-in sinks' types and options (they must be installed here);
    off for commands that never build sinks (``knarr dlq inspect``).

    Raises :class:`ConfigError` naming each bad key, what was expected and what to do.
    """
    env = os.environ if env is None else env
    if path is None and env.get(CONFIG_PATH_ENV):
        path = env[CONFIG_PATH_ENV]
    yaml_path: Path | None = None
    data: dict[str, Any] = {}
    if path is not None:
        yaml_path = Path(path)
        # Paths in the file are relative to the file, not to wherever the worker is started.
        data = resolve_paths(KnarrConfig, _read_yaml_file(yaml_path), yaml_path.resolve().parent)
    overrides, problems = env_overrides(KnarrConfig, env, data)
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(problems))
    _report_not_config(env)
    config = _validate(deep_merge(data, overrides), yaml_path)
    if plugins and config.sinks.plugin:
        _check_plugins(config, yaml_path)
    return config


def _report_not_config(env: Mapping[str, str]) -> None:
    unreported = [name for name in not_config_env(KnarrConfig, env) if name not in _reported_not_config]
    if unreported:
        _reported_not_config.update(unreported)
        _log.debug("not configuration, left alone (config overrides look like KNARR_SECTION__KEY): %s",
                   ", ".join(unreported))


def _check_plugins(config: KnarrConfig, yaml_path: Path | None) -> None:
    """Plug-in sinks' types and options, checked where the worker runs (the plug-in is installed there,
    not necessarily where a config is only validated, as in the operator)."""
    from knarr.sinks.plugins import problems

    found = problems(config.sinks.plugin)
    if found:
        where = f" in {str(yaml_path)!r}" if yaml_path else ""
        lines = [line for problem in found for line in problem.splitlines()]
        raise ConfigError(f"invalid configuration{where}:\n" + "\n".join(f"  {line}" for line in lines))


def config_from_dict(data: Mapping[str, Any]) -> KnarrConfig:
    """Validate a config given as plain data (tests, the operator, the Spark job), no env applied."""
    return _validate(dict(data), None)


def _validate(data: dict[str, Any], yaml_path: Path | None) -> KnarrConfig:
    try:
        return KnarrConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, yaml_path)) from None


def _read_yaml_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist; pass --config PATH or set {CONFIG_PATH_ENV}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections (kafka:, executor:, sinks:, ...), not {type(data).__name__}")
    return data or {}


def format_validation_error(exc: ValidationError, yaml_path: Path | None) -> str:
    """One line per problem: the key, what is wrong, the value given (never a secret's), the env variable."""
    where = f" in {str(yaml_path)!r} (or its KNARR_* env overrides)" if yaml_path else ""
    lines = [f"invalid configuration{where}:"]
    for err in _merge_union_errors(exc.errors()):
        loc = [str(p) for p in err["loc"]]
        key = ".".join(loc) or "(root)"
        env_var = env_name(KnarrConfig, loc) if loc else ""
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key; check its spelling against the configuration reference"
        elif err["type"] == "missing":
            msg = "required key is missing"
        lines.append(f"  {key}: {msg}{_given(err, loc)}{f' [env: {env_var}]' if env_var else ''}")
    return "\n".join(lines)


_SCALAR_TAGS = {"str": "text", "int": "a whole number", "float": "a number", "bool": "true/false"}


def _merge_union_errors(errors: list[Any]) -> list[Any]:
    """A value fitting none of ``str | int | float | bool`` is one problem, not one per type."""
    out: list[Any] = []
    merged: dict[tuple, Any] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if loc and loc[-1] in _SCALAR_TAGS:
            key = loc[:-1]
            if key in merged:
                merged[key]["expected"].append(_SCALAR_TAGS[loc[-1]])
                continue
            entry = {**err, "loc": key, "expected": [_SCALAR_TAGS[loc[-1]]]}
            merged[key] = entry
            out.append(entry)
        else:
            out.append(err)
    for entry in merged.values():
        kinds = entry.pop("expected")
        if len(kinds) > 1:
            entry["msg"] = f"Input should be {', '.join(kinds[:-1])} or {kinds[-1]}"
    return out


def _given(err: Any, loc: list[str]) -> str:
    """What was given, for the message: nothing for a section, a placeholder for a secret."""
    if "input" not in err or err["type"] in ("missing", "extra_forbidden"):
        return ""
    value = err["input"]
    if isinstance(value, dict):
        return ""
    if is_masked(loc, value) or _holds_credentials(value):
        return " (got a value that is not shown: it may be a secret)"
    return f" (got {value!r})"


def _holds_credentials(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return any(_holds_credentials(v) for v in value)
    return has_credentials(value)
