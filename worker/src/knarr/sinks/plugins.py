"""Plug-in sinks: sink types that installed packages add through entry points (group ``knarr.sinks``).

A package declares, in its pyproject::

    [project.entry-points."knarr.sinks"]
    audit-log = "my_package.sink:AuditLogSink"

and a config uses it as ``sinks.plugin.<name>: {type: audit-log, options: {...}}``. The class has

- ``config_model``: a pydantic model of its options, validated when the worker loads its config
  (an error names ``sinks.plugin.<name>.options.<field>``); without one the options come as a dict;
- ``from_config(name, options, root_config)`` (or a constructor taking ``(name, options)``);
- the :class:`~knarr.sinks.base.Sink` methods: ``async deliver(payloads)``, and optionally
  ``async connect()`` / ``async close()``. ``deliver`` raises
  :class:`~knarr.sinks.base.TransientSinkError` when its server is away (the delivery waits) and
  anything else when the server refused the payloads (``on_delivery_error`` decides, DLQ by default).

Payloads reach it as ``CollectResult.plugin``: :class:`~knarr.api.payloads.PluginPayload` objects
whose ``sink`` names the instance (empty: the only plug-in instance). Metrics and DLQ records name
the plug-in's type (the entry point name) as the sink type.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from pydantic import BaseModel, ValidationError

from knarr.config.models import SINK_TYPES, PluginSinkConfig
from knarr.errors import ConfigError, KnarrError
from knarr.sinks.base import SinkConnectError

ENTRY_POINT_GROUP = "knarr.sinks"
HOW_TO_INSTALL = ("install the package that provides it into the worker's environment (e.g. `pip install "
                  "<package>`, or add it to the image); docs/plugins.md says how to write one")


class PluginSinkError(ConfigError):
    """A plug-in sink cannot be used: its type is not installed, does not load, or its options are invalid."""


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    """One entry point of the ``knarr.sinks`` group: a sink type, and the package that adds it."""

    type: str
    target: str  # "module:Class"
    package: str
    version: str
    entry_point: Any = field(default=None, compare=False, repr=False)

    @property
    def label(self) -> str:
        return f"{self.type} ({self.package} {self.version})" if self.package else self.type


def installed() -> dict[str, list[InstalledPlugin]]:
    """Every installed plug-in sink type (a type two packages claim lists both)."""
    found: dict[str, list[InstalledPlugin]] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        found.setdefault(ep.name, []).append(InstalledPlugin(
            ep.name, ep.value, dist.metadata["Name"] if dist is not None else "", dist.version if dist is not None else "",
            ep))
    return found


def installed_text() -> str:
    plugins = [p.label for _, entries in sorted(installed().items()) for p in entries]
    return ", ".join(plugins) if plugins else "none"


def plugin_class(name: str, config: PluginSinkConfig) -> tuple[type, InstalledPlugin]:
    """The class the instance ``sinks.plugin.<name>`` names with its ``type``."""
    where = f"sinks.plugin.{name}.type"
    if config.type in SINK_TYPES:
        raise PluginSinkError(f"{where}: {config.type!r} is a built-in sink type; configure it as "
                              f"sinks.{config.type}.{name} instead")
    entries = installed().get(config.type, [])
    if not entries:
        raise PluginSinkError(f"{where}: no installed plug-in sink is called {config.type!r} (installed: "
                              f"{installed_text()}); {HOW_TO_INSTALL}")
    if len(entries) > 1:
        raise PluginSinkError(f"{where}: {len(entries)} installed packages add a sink type {config.type!r} ("
                              f"{', '.join(e.label for e in entries)}); uninstall all but one")
    plugin = entries[0]
    try:
        cls = plugin.entry_point.load()
    except Exception as exc:  # an import error in the plug-in's package: say which and why
        raise PluginSinkError(f"{where}: the plug-in {plugin.label} ({plugin.target}) does not load: "
                              f"{type(exc).__name__}: {exc}; fix or reinstall that package") from None
    if not callable(getattr(cls, "deliver", None)):
        raise PluginSinkError(f"{where}: the plug-in {plugin.label} ({plugin.target}) has no deliver(payloads) "
                              "method; a plug-in sink class needs one (see docs/plugins.md)")
    return cls, plugin


def plugin_options(name: str, cls: type, options: dict[str, Any]) -> Any:
    """The instance's options, validated by the plug-in's ``config_model`` (a dict when it has none)."""
    model = getattr(cls, "config_model", None)
    if model is None:
        return dict(options)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise PluginSinkError(f"sinks.plugin.{name}: the plug-in's config_model must be a pydantic model class, "
                              f"not {model!r}")
    try:
        return model.model_validate(options)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            key = ".".join(str(p) for p in (f"sinks.plugin.{name}.options", *err["loc"]))
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown option; check its spelling against the plug-in's documentation"
            elif err["type"] == "missing":
                msg = "required option is missing"
            lines.append(f"{key}: {msg}")
        raise PluginSinkError("\n".join(lines)) from None


def problems(configs: dict[str, PluginSinkConfig]) -> list[str]:
    """Everything wrong with the configured plug-in sinks (nothing is built or connected)."""
    out = []
    for name, config in configs.items():
        try:
            cls, _ = plugin_class(name, config)
            plugin_options(name, cls, config.options)
        except KnarrError as exc:
            out.append(str(exc))
    return out


def build(name: str, config: PluginSinkConfig, root: Any) -> PluginSink:
    cls, plugin = plugin_class(name, config)
    options = plugin_options(name, cls, config.options)
    factory = getattr(cls, "from_config", None)
    try:
        inner = factory(name, options, root) if factory is not None else cls(name, options)
    except KnarrError:
        raise
    except Exception as exc:
        raise PluginSinkError(f"sinks.plugin.{name}: the plug-in {plugin.label} could not be set up: "
                              f"{type(exc).__name__}: {exc}") from None
    return PluginSink(name, config.type, inner)


class PluginSink:
    """A plug-in's sink object as knarr drives it: named by the config, typed by its entry point.

    Its ``kind`` is ``plugin`` (the payloads of ``CollectResult.plugin`` go to it); its ``sink_type``
    (metrics labels, DLQ records, logs) is the plug-in's type.
    """

    kind = "plugin"

    def __init__(self, name: str, sink_type: str, inner: Any) -> None:
        self.name = name
        self.sink_type = sink_type
        self.inner = inner

    async def connect(self) -> None:
        try:
            await _call(self.inner, "connect")
        except KnarrError:
            raise
        except Exception as exc:
            raise SinkConnectError(f"plug-in sink {self.name!r} (type {self.sink_type}) cannot connect: "
                                   f"{type(exc).__name__}: {exc}") from None

    async def deliver(self, payloads: list[Any]) -> None:
        await _call(self.inner, "deliver", payloads)

    async def close(self) -> None:
        await _call(self.inner, "close")


async def _call(obj: Any, method: str, *args: Any) -> Any:
    fn = getattr(obj, method, None)
    if fn is None:
        return None
    result = fn(*args)
    return await result if inspect.isawaitable(result) else result
