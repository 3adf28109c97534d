"""The hook stages' flight events: counted always, built only when a recorder or a DEBUG log reads them."""

from __future__ import annotations

import json

import pytest
import structlog

from knarr.observability import events
from knarr.observability import logging as knarr_logging
from knarr.observability.logging import configure_logging


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def record(self, *args: object) -> None:
        self.calls.append(args)


def task_fields() -> events.Fields:
    return 3, 41, "t-1", 0.25, {"labels": {"tier": "gold"}, "output_message_count": 2}


def window_fields() -> events.Fields:
    return 3, None, None, 1.5, {"window_id": 7, "task_count": 4, "output_message_count": 0}


@pytest.fixture(autouse=True)
def logging_as_it_was():
    """Each test configures logging its way; the tests after it find it as it was."""
    saved, debug = structlog.get_config(), knarr_logging.debug_enabled
    yield
    structlog.configure(**saved)
    knarr_logging.debug_enabled = debug


@pytest.fixture
def quiet_logs():
    configure_logging("WARNING")


def test_with_no_recorder_and_no_debug_log_the_fields_are_never_built(quiet_logs):
    def never() -> events.Fields:
        raise AssertionError("built for nobody")

    events.emit("task_complete", None, never)


def test_the_recorder_takes_the_columns_as_they_are_and_the_rest_as_data(quiet_logs):
    recorder = Recorder()
    events.emit("task_complete", recorder, task_fields)
    events.emit("window_complete", recorder, window_fields)
    assert recorder.calls == [
        ("task_complete", 3, 41, "t-1", None, 250.0, {"labels": {"tier": "gold"}, "output_message_count": 2}),
        ("window_complete", 3, None, None, None, 1500.0, {"window_id": 7, "task_count": 4, "output_message_count": 0}),
    ]


def test_the_debug_log_line_has_the_columns_it_has_and_the_data_in_one_mapping(capfd):
    configure_logging("DEBUG")
    events.emit("task_complete", None, task_fields)
    events.emit("window_complete", None, window_fields)
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    task, window = ({k: v for k, v in line.items() if k not in ("timestamp", "level", "component")} for line in lines)
    assert task == {"event": "task_complete", "partition": 3, "offset": 41, "task_id": "t-1",
                    "labels": {"tier": "gold"}, "output_message_count": 2, "duration": 0.25}
    assert window == {"event": "window_complete", "partition": 3, "window_id": 7, "task_count": 4,
                      "output_message_count": 0, "duration": 1.5}
