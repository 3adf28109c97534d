"""The engine's own models, built from values it already holds, without validation and quickly.

The engine builds three models per message (the SourceMessage a poll brings, an ExecutorResult,
a MessageGroup) from values that are already checked. pydantic's ``model_construct`` walks
every field for its default and alias on each call (2.5 µs for an ExecutorResult here);
``trusted`` copies a per-class table of the defaults instead (1.4 µs) and gives the same model:
the same values in field order, the same ``model_fields_set``.
A model with private attributes, or a call that leaves out a field with no plain default (a
required one, or one with a default factory), goes to ``model_construct``.

For a model built on every task, ``trusted_builder`` compiles that copy once: a function taking
every field, that writes them straight into the model (the same model as ``trusted`` given every
field), in half the bytecodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)
_setattr = object.__setattr__
_MISSING = object()
_tables: dict[type, tuple[dict[str, Any], frozenset[str]]] = {}


def _plain(cls: type[BaseModel]) -> bool:
    """A model whose fields are its whole state (no private attributes, no extra fields): one a copy can build."""
    return not cls.__private_attributes__ and cls.model_config.get("extra") != "allow"


def _table(cls: type[BaseModel]) -> tuple[dict[str, Any], frozenset[str]]:
    """Every field in order with its plain default (or a placeholder), and the fields a call must give."""
    defaults, needed = {}, set()
    for name, field in cls.model_fields.items():
        if field.is_required() or field.default_factory is not None:
            defaults[name] = _MISSING
            needed.add(name)
        else:
            defaults[name] = field.default
    return defaults, frozenset(needed)


def trusted(cls: type[M], /, **values: Any) -> M:
    """``cls.model_construct(**values)``, faster: for values that need no validation."""
    table = _tables.get(cls)
    if table is None:
        if not _plain(cls):
            return cls.model_construct(**values)
        table = _tables[cls] = _table(cls)
    defaults, needed = table
    if not needed <= values.keys():
        return cls.model_construct(**values)
    fields = defaults.copy()
    fields.update(values)
    model = cls.__new__(cls)
    _setattr(model, "__dict__", fields)
    _setattr(model, "__pydantic_fields_set__", set(values))
    _setattr(model, "__pydantic_extra__", None)
    _setattr(model, "__pydantic_private__", None)
    return model


_BUILDER_NAMES = frozenset({"model", "new", "cls", "setattr", "set", "every"})  # the builder's own names


def trusted_builder(cls: type[M]) -> Callable[..., M]:
    """A function taking every field of ``cls`` by name, that builds what ``trusted(cls, **fields)``
    builds. For models without private attributes or extra fields (ValueError otherwise)."""
    if not _plain(cls):
        raise ValueError(f"{cls.__name__} has private attributes or extra fields: build it with trusted()")
    names = list(cls.model_fields)
    taken = sorted(_BUILDER_NAMES.intersection(names)) + [name for name in names if not name.isidentifier()]
    if taken:
        raise ValueError(f"{cls.__name__} has fields whose names the builder cannot take ({', '.join(taken)}): "
                         "build it with trusted()")
    fields = ", ".join(f"{name!r}: {name}" for name in names)
    source = (f"def build(*, {', '.join(names)}):\n"
              "    model = new(cls)\n"
              f"    setattr(model, '__dict__', {{{fields}}})\n"
              "    setattr(model, '__pydantic_fields_set__', set(every))\n"
              "    setattr(model, '__pydantic_extra__', None)\n"
              "    setattr(model, '__pydantic_private__', None)\n"
              "    return model\n")
    scope: dict[str, Any] = {"new": cls.__new__, "cls": cls, "setattr": _setattr, "every": frozenset(names)}
    exec(compile(source, f"<trusted builder of {cls.__qualname__}>", "exec"), scope)
    build = scope["build"]
    build.__qualname__ = f"trusted_builder.<{cls.__qualname__}>"
    return build
