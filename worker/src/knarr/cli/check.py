"""``knarr check``: is this config and handler ready to deploy? Without connecting to anything.

It loads the config exactly as ``knarr run`` does (YAML, ``KNARR_*`` env, paths relative to
the file), imports the handler and checks it against the hook contract, checks that every
configured sink type exists in this version (a plug-in's type is installed and its options valid), and prints the resolved configuration with
credentials masked. Problems go to stderr and end it with exit code 2; warnings (things
that work but probably are not what was meant) do not fail it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from knarr.api.contract import HOOKS
from knarr.api.handler import BaseHandler
from knarr.config.loading import load_config
from knarr.config.masking import masked
from knarr.cli.run import require_config_path
from knarr.config.root import KnarrConfig, dump_config
from knarr.engine.processes import binary_problem
from knarr.errors import ExitCode, KnarrError, UsageError
from knarr.loader import load_handler_class
from knarr.sinks.plugins import installed, installed_text

OUTPUT_HOOKS = ("on_task_complete", "on_message_complete", "on_window_complete")


def check_command(config_path: str | None, handler_option: str | None) -> int:
    path = require_config_path(config_path)
    problems: list[str] = []
    config: KnarrConfig | None = None
    try:
        config = load_config(path)
    except KnarrError as exc:
        problems.append(str(exc))
    spec = handler_option or (config.handler if config else "")
    handler_cls = None
    try:
        handler_cls = load_handler_class(_required(spec, config))
    except KnarrError as exc:
        problems.append(str(exc))
    if config is not None:
        problems += _sink_problems(config)
    if problems:
        for problem in problems:
            print(f"knarr check: {problem}", file=sys.stderr)
        return ExitCode.USAGE

    assert config is not None and handler_cls is not None
    print(f"config:  {path}: ok")
    hooks = [name for name in HOOKS if getattr(handler_cls, name) is not getattr(BaseHandler, name)]
    print(f"handler: {spec}: ok (hooks: {', '.join(hooks)})")
    print(f"sinks:   {sinks_text(config)}")
    print(f"plug-in sink types installed: {installed_text()}")
    for warning in warnings(config, handler_cls):
        print(f"warning: {warning}")
    print("\n# the resolved configuration (credentials masked)")
    print(yaml.safe_dump(masked(dump_config(config)), sort_keys=False).rstrip())
    return ExitCode.OK


def _required(spec: str, config: KnarrConfig | None) -> str:
    if not spec:
        where = "set `handler:` in the config" if config else "fix the config so its `handler:` key can be read"
        raise UsageError(f"no handler to check: pass --handler module:Class (or path/to/file.py:Class), or {where}")
    return spec


def _sink_problems(config: KnarrConfig) -> list[str]:
    from knarr.sinks import build_sinks  # builds the sink objects only; nothing connects

    try:
        build_sinks(config)
    except KnarrError as exc:
        return [str(exc)]
    return []


def sinks_text(config: KnarrConfig) -> str:
    """Every configured sink, a plug-in with its type and the package that adds it."""
    found = installed()
    shown = []
    for sink_type, name, cfg in config.sinks.instances():
        if sink_type == "plugin":
            plugin_type = cfg.type  # type: ignore[attr-defined]
            origin = [f" from {p.package} {p.version}" for p in found.get(plugin_type, [])[:1] if p.package]
            shown.append(f"plugin {name} ({plugin_type}{''.join(origin)})")
        else:
            shown.append(f"{sink_type} {name}")
    return ", ".join(shown)


def warnings(config: KnarrConfig, handler_cls: type) -> list[str]:
    """Things that run but are probably not what was meant."""
    out = []
    if all(getattr(handler_cls, h) is getattr(BaseHandler, h) for h in OUTPUT_HOOKS):
        out.append(f"{handler_cls.__name__} overrides none of {', '.join(OUTPUT_HOOKS)}: nothing will reach the sinks")
    if config.source.type == "local" and config.source.local is not None:
        if not Path(config.source.local.path).is_file():
            out.append(f"source.local.path {config.source.local.path!r} does not exist (yet)")
        if not config.dlq.path:
            out.append(f"the source is local but dlq.path is empty: dead letters go to the Kafka topic "
                       f"{config.dlq_topic!r} at {config.dlq_brokers!r}; set dlq.path to keep them in a file")
    persistent = config.executor.persistent
    programs = [binary_problem(config.executor.binary_path),
                binary_problem(persistent.command[0], "executor.persistent.command's program")
                if persistent is not None and persistent.command else None]
    out.extend(f"{problem}: a worker refuses to start where it cannot run" for problem in programs if problem)
    cache = config.cache
    if not cache.enabled and (cache.db_dir or cache.shared is not None):
        out.append("cache.db_dir or cache.shared is set but cache.enabled is false: the handler cache is off "
                   "and self.cache raises; set cache.enabled: true")
    elif cache.enabled and not cache.db_dir and cache.shared is None:
        out.append("the handler cache keeps its entries in memory only (no cache.db_dir, no cache.shared): "
                   "they are gone when the worker restarts")
    return out
