"""The handler: the user's code. Subclass BaseHandler[InputModel, OutputModel] and override hooks."""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from knarr.api.cache import DISABLED
from knarr.api.groups import MessageGroup, PendingContext
from knarr.api.messages import SourceMessage
from knarr.api.payloads import CollectResult, DeliveryAction, DeliveryError
from knarr.api.tasks import ErrorAction, ExecutorError, ExecutorResult, ExecutorTask

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")

PERIODIC_ATTR = "__knarr_periodic__"


class PeriodicSpec(BaseModel):
    seconds: float
    on_error: Literal["continue", "stop"] = "continue"


def periodic(seconds: float, on_error: Literal["continue", "stop"] = "continue") -> Callable:
    """Run the decorated ``async def`` handler method every ``seconds`` while the worker runs.

    Runs never overlap: the next interval starts after the previous run returns. An exception is
    logged and the loop goes on (``on_error='continue'``) or ends (``'stop'``).
    """
    if seconds <= 0:
        raise ValueError(f"periodic(seconds={seconds}) must be positive")
    if on_error not in ("continue", "stop"):
        raise ValueError(f"periodic(on_error={on_error!r}) must be 'continue' or 'stop'")

    def decorate(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        import inspect

        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@periodic needs an async method: make {getattr(fn, '__qualname__', fn)!r} an `async def`")
        setattr(fn, PERIODIC_ATTR, PeriodicSpec(seconds=seconds, on_error=on_error))
        return fn

    return decorate


class BaseHandler(Generic[InputT, OutputT]):
    """Base class of every knarr handler.

    ``BaseHandler[MyInput, MyOutput]`` makes the worker parse each message's JSON value into
    ``MyInput`` (``msg.payload``; None when it does not parse). Only ``arrange`` is required.
    """

    input_model: type[BaseModel] | None = None
    output_model: type[BaseModel] | None = None
    # The handler cache: the worker puts its cache here when cache.enabled is true; until then
    # every use raises an error saying how to turn it on.
    cache: Any = DISABLED

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if typing.get_origin(base) is BaseHandler:
                args = typing.get_args(base)
                if args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
                    cls.input_model = args[0]
                if len(args) > 1 and isinstance(args[1], type) and issubclass(args[1], BaseModel):
                    cls.output_model = args[1]

    # --- lifecycle -------------------------------------------------------------------------
    async def on_startup(self, config: Any) -> Any:
        """Called first, with the loaded KnarrConfig; may return a modified copy."""
        return config

    async def on_ready(self, config: Any, pg_pool: Any = None) -> None:
        """Called once sinks are connected, before consumption starts.

        Define it as ``on_ready(self, config)`` or ``on_ready(self, config, pool)``: the worker
        looks at the signature. ``pool`` is the PostgreSQL sink's connection pool, None when
        there is none.
        """

    async def on_assign(self, partitions: list[int]) -> None:
        """Partitions newly assigned to this worker."""

    async def on_revoke(self, partitions: list[int]) -> None:
        """Partitions taken away (after they drained)."""

    # --- input -----------------------------------------------------------------------------
    def deserialize_message(self, msg: SourceMessage) -> None:
        """Fill ``msg.payload`` from ``msg.value``. A value that does not parse leaves it None."""
        if self.input_model is None:
            return
        try:
            msg.payload = self.input_model.model_validate_json(msg.value)
        except (ValidationError, ValueError) as exc:
            msg.payload = None
            msg.parse_error = _short_error(exc)

    def message_label(self, msg: SourceMessage) -> str:
        """How a message is named in logs and events."""
        return f"{msg.partition}:{msg.offset}"

    # --- processing ------------------------------------------------------------------------
    async def arrange(self, messages: list[SourceMessage], pending: PendingContext) -> list[ExecutorTask]:
        """Turn a window of messages into tasks. Every task names the offsets it works for."""
        raise NotImplementedError(f"{type(self).__name__} must implement arrange(messages, pending)")

    def task_priority(self, task: ExecutorTask) -> int:
        """Order among waiting tasks in the pool: lower runs first (default 0 for all)."""
        return 0

    async def on_task_complete(self, result: ExecutorResult) -> CollectResult | None:
        """A task exited 0. Return payloads to deliver, or None."""
        return None

    async def on_message_complete(self, group: MessageGroup) -> CollectResult | None:
        """Every task of one source message is terminal. Return its aggregate, or None."""
        return None

    async def on_window_complete(
        self, results: list[ExecutorResult], source_messages: list[SourceMessage]
    ) -> CollectResult | None:
        """Every task of an arrange() window is terminal."""
        return None

    async def on_error(self, task: ExecutorTask, error: ExecutorError) -> ErrorAction | list[ExecutorTask]:
        """A task failed: RETRY it, SKIP it, or return replacement tasks. Default: SKIP."""
        return ErrorAction.SKIP

    async def on_delivery_error(self, error: DeliveryError) -> DeliveryAction:
        """A sink delivery failed: RETRY, SKIP or DLQ. Default: DLQ."""
        return DeliveryAction.DLQ


def _short_error(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) < 500 else text[:497] + "..."


def ready_arguments(on_ready: Callable[..., Any], config: Any, pool: Any) -> tuple[Any, ...]:
    """The arguments the bound ``on_ready`` takes: ``(config,)`` or ``(config, pool)``, read from its signature."""
    import inspect

    try:
        params = list(inspect.signature(on_ready).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a C callable): give it what the base class takes
        return (config, pool)
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return (config, pool)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2:
        return (config, pool)
    if len(positional) == 1:
        return (config,)
    raise TypeError(f"on_ready{inspect.signature(on_ready)} must take (config) or (config, pool)")


def periodic_methods(handler: BaseHandler) -> list[tuple[str, PeriodicSpec, Callable[[], Awaitable[Any]]]]:
    """The handler's @periodic methods, bound, with their schedule."""
    found = []
    for name in dir(type(handler)):
        attr = getattr(type(handler), name, None)
        spec = getattr(attr, PERIODIC_ATTR, None)
        if isinstance(spec, PeriodicSpec):
            found.append((name, spec, getattr(handler, name)))
    return found
