"""A hook the handler leaves at BaseHandler's is not called; one it defines is, every time it should be."""

from __future__ import annotations

import asyncio

import knarr
import pytest
from prometheus_client import REGISTRY
from knarr.api.handler import BaseHandler
from knarr.engine.worker import Worker
from knarr.runtime.hooks import defines
from knarr.sources.memory import MemorySource

from tests.worker.harness import BEHAVE, local_config

PER_MESSAGE_HOOKS = ("deserialize_message", "message_label", "task_priority", "on_task_complete",
                     "on_message_complete", "on_window_complete")


class OnlyArrange(knarr.BaseHandler[None, None]):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[f"out={m.offset}"], source_offsets=[m.offset]) for m in messages]


class Everything(OnlyArrange):
    def __init__(self):
        self.calls = {name: 0 for name in PER_MESSAGE_HOOKS}

    def deserialize_message(self, msg):
        self.calls["deserialize_message"] += 1

    def message_label(self, msg):
        self.calls["message_label"] += 1
        return "mine"

    def task_priority(self, task):
        self.calls["task_priority"] += 1
        return 0

    async def on_task_complete(self, result):
        self.calls["on_task_complete"] += 1

    async def on_message_complete(self, group):
        self.calls["on_message_complete"] += 1

    async def on_window_complete(self, results, source_messages):
        self.calls["on_window_complete"] += 1


def _run(tmp_path, handler, count: int, value: bytes = b"{}") -> Worker:
    config = local_config(tmp_path, binary_path=BEHAVE, max_executors=2, window_size=5)
    messages = [knarr.SourceMessage(topic="t", partition=0, offset=o, value=value) for o in range(count)]
    worker = Worker(config, handler, source=MemorySource(messages))
    assert asyncio.run(asyncio.wait_for(worker.run(), 60)) == 0
    return worker


def _flight(event: str) -> float:
    return REGISTRY.get_sample_value("knarr_flight_events_total", {"event": event}) or 0.0


def test_hooks_left_at_their_defaults_are_never_called(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a hook the handler does not define was called")

    for name in PER_MESSAGE_HOOKS:
        monkeypatch.setattr(BaseHandler, name, never)  # what OnlyArrange inherits
        assert not defines(OnlyArrange(), name)
    before = {e: _flight(e) for e in ("task_complete", "message_complete", "window_complete")}
    worker = _run(tmp_path, OnlyArrange(), 10)
    assert worker.stats.succeeded == 10 and worker.stats.messages == 10 and worker.stats.failed == 0
    # The stages still happen and are counted as flight events, hooks or not
    assert _flight("task_complete") - before["task_complete"] == 10
    assert _flight("message_complete") - before["message_complete"] == 10
    assert _flight("window_complete") - before["window_complete"] == 2


def test_hooks_the_handler_defines_are_called_for_every_task_message_and_window(tmp_path):
    handler = Everything()
    assert all(defines(handler, name) for name in PER_MESSAGE_HOOKS)
    _run(tmp_path, handler, 10)
    assert handler.calls == {"deserialize_message": 10, "message_label": 10, "task_priority": 10,
                             "on_task_complete": 10, "on_message_complete": 10, "on_window_complete": 2}


def test_an_input_model_still_parses_messages_without_a_deserialize_message_of_its_own(tmp_path):
    from pydantic import BaseModel

    class Row(BaseModel):
        id: int

    class Typed(knarr.BaseHandler[Row, None]):
        async def arrange(self, messages, pending):
            self.ids = [m.payload.id for m in messages]
            return []

    handler = Typed()
    _run(tmp_path, handler, 1, b'{"id": 7}')
    assert handler.ids == [7]


@pytest.mark.parametrize("name", PER_MESSAGE_HOOKS)
def test_a_wrapper_that_forwards_unknown_hooks_counts_as_defining_them(name):
    class Forwarding:  # like the message probe's handler: whatever it lacks, the user's handler answers
        def __getattr__(self, attr):
            return getattr(OnlyArrange(), attr)

    assert defines(Forwarding(), name)
