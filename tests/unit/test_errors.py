"""One error tree, one table of exit codes: every error for people carries its code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import knarr
import knarr_spark
from knarr.errors import EXIT_CODE_MEANINGS, ConfigError, ExitCode, HandlerError, KnarrError, UnavailableError

# Exceptions that never reach the command line, each for a reason.
INTERNAL = {
    "knarr.sinks.filesystem.PathEscapeError": "a payload's path: a delivery failure, dead-lettered like any other",
    "knarr_spark.processing.ChunkFailed": "tells Spark to run the task again; its last attempt is reported",
    "knarr.config.librdkafka.ConsumerSettingsError": "the Kafka client refuses the settings: startup turns it into a ConfigError naming the keys",
    "knarr.sinks.base.TransientSinkError": "a sink that is down for now: the delivery waits and retries, never reaches people as an error",
    "knarr.sinks.base.PermanentSinkError": "a sink refused a batch: on_delivery_error decides, the DLQ record carries the message",
    "knarr.engine.ledger.ArrangeRefused": "an arrange() result the engine will not run: that part of the window is dead-lettered",
    "knarr.engine.frames.FrameError": "bytes that are no frame: the persistent program is replaced and its task fails with reason protocol",
    "knarr.engine.programs.ProgramFailure": "a persistent program that could not answer: its task fails (timeout, crash, protocol, launch) through on_error",
    "knarr.dlq.records.UnreadableRecord": "a DLQ entry that is no record: knarr dlq counts it as unreadable and goes on",
    "knarr.engine.spawner.SpawnerFailed": "the spawner thread failed on a task: run_process turns it into that task's launch error",
    "knarr.engine.native.NativeRunnerMissing": "executor.spawner: auto falls back to the spawner thread with a warning; native turns it into a ConfigError",
}


def _exception_classes() -> dict[str, type]:
    found = {}
    for package in (knarr, knarr_spark):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                    found[f"{info.name}.{name}"] = obj
    return found


def test_every_error_knarr_defines_is_a_knarr_error_or_named_as_internal():
    outside = sorted(name for name, cls in _exception_classes().items()
                     if not issubclass(cls, KnarrError) and name not in INTERNAL)
    assert outside == []


def test_every_exit_code_has_a_meaning_and_every_error_an_exit_code_from_the_table():
    assert set(EXIT_CODE_MEANINGS) == set(ExitCode)
    for name, cls in _exception_classes().items():
        if issubclass(cls, KnarrError):
            assert cls.exit_code in ExitCode, name


@pytest.mark.parametrize(("error", "code"), [(ConfigError, 2), (HandlerError, 2), (UnavailableError, 3), (KnarrError, 1)])
def test_the_exit_codes_keep_their_documented_meanings(error, code):
    assert error("x").exit_code == code


def test_the_sink_connection_and_backfill_errors_sit_in_the_tree():
    from knarr.sinks.base import SinkConnectError
    from knarr_spark.kafka_input import KafkaReadError
    from knarr_spark.ranges import RangeError

    assert SinkConnectError.exit_code == ExitCode.UNAVAILABLE
    assert KafkaReadError.exit_code == ExitCode.UNAVAILABLE
    assert RangeError.exit_code == ExitCode.USAGE
