"""What a handler class must look like, checked before anything runs.

A misspelled hook (``on_task_complet``) is never called, so its output silently goes
nowhere; a hook with the wrong parameters or a missing ``async`` fails only when the first
message arrives. :func:`handler_problems` finds all of these from the class alone.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass

from knarr.api.handler import PERIODIC_ATTR, BaseHandler


@dataclass(frozen=True)
class Hook:
    name: str
    params: tuple[str, ...]  # what the worker passes, positionally
    is_async: bool = True
    also: tuple[str, ...] | None = None  # another argument list the worker passes when the hook takes it

    @property
    def signature(self) -> str:
        prefix = "async def" if self.is_async else "def"
        return f"{prefix} {self.name}(self, {', '.join(self.params)})"


HOOKS: dict[str, Hook] = {
    h.name: h
    for h in (
        Hook("arrange", ("messages", "pending")),
        Hook("on_task_complete", ("result",)),
        Hook("on_message_complete", ("group",)),
        Hook("on_window_complete", ("results", "source_messages")),
        Hook("on_error", ("task", "error")),
        Hook("on_delivery_error", ("error",)),
        Hook("on_startup", ("config",)),
        Hook("on_ready", ("config",), also=("config", "pool")),
        Hook("on_assign", ("partitions",)),
        Hook("on_revoke", ("partitions",)),
        Hook("deserialize_message", ("msg",), is_async=False),
        Hook("message_label", ("msg",), is_async=False),
        Hook("task_priority", ("task",), is_async=False),
    )
}


def handler_problems(cls: type[BaseHandler]) -> list[str]:
    """Everything wrong with ``cls`` as a handler, one sentence each (empty: it is fine)."""
    problems = []
    if getattr(cls, "arrange", None) is BaseHandler.arrange:
        problems.append(f"{cls.__name__} does not define arrange(); add `{HOOKS['arrange'].signature}` "
                        "returning the window's tasks")
    for name, attr in _own_methods(cls):
        hook = HOOKS.get(name)
        if hook is not None:
            problems += _signature_problems(cls, hook, attr)
        elif _looks_like_a_hook(name) and not hasattr(attr, PERIODIC_ATTR):
            problems.append(_unknown_hook(cls, name, attr))
    return problems


def _own_methods(cls: type) -> list[tuple[str, object]]:
    """Functions defined by the user's classes (not by BaseHandler), in definition order."""
    seen: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, BaseHandler) or not issubclass(klass, BaseHandler):
            continue
        for name, attr in vars(klass).items():
            if inspect.isfunction(attr) and not name.startswith("_"):
                seen[name] = attr
    return list(seen.items())


def _looks_like_a_hook(name: str) -> bool:
    return name.startswith("on_") or bool(difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.8))


def _unknown_hook(cls: type, name: str, attr: object) -> str:
    where = _where(attr)
    close = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"the hooks are: {', '.join(HOOKS)}"
    return (f"{where}{cls.__name__}.{name} is not a handler hook and would never be called; {hint} "
            "(a helper method should not be named like a hook)")


def _signature_problems(cls: type, hook: Hook, fn: object) -> list[str]:
    where, problems = _where(fn), []
    if hook.is_async and not inspect.iscoroutinefunction(fn):
        problems.append(f"{where}{cls.__name__}.{hook.name} must be `async def` (the worker awaits it): {hook.signature}")
    elif not hook.is_async and inspect.iscoroutinefunction(fn):
        problems.append(f"{where}{cls.__name__}.{hook.name} must be a plain `def`, not async: {hook.signature}")
    if not any(_takes(fn, params) for params in (hook.params, hook.also) if params is not None):
        problems.append(f"{where}{cls.__name__}.{hook.name}{inspect.signature(fn)} cannot take what the worker "
                        f"passes; write {hook.signature}")
    return problems


def _takes(fn: object, params: tuple[str, ...]) -> bool:
    try:
        inspect.signature(fn).bind(None, *params)
    except TypeError:
        return False
    return True


def _where(fn: object) -> str:
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}: " if code is not None else ""
