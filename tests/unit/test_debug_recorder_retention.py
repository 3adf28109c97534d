"""The flight recorder's retention by count: the oldest events go, a whole file at a time, and nothing is counted twice.

These drive the recorder's own thread-side steps (write a batch, rotate, retain) directly on files
in a temporary ``db_dir``, as its thread would, without an event loop.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import deque
from pathlib import Path

from knarr.config.models import DebugConfig
from knarr.debug import recorder as recorder_module
from knarr.debug.files import file_stamp, recorder_files, stamp_of
from knarr.debug.recorder import FILE_MIN_EVENTS, FlightRecorder


def file_recorder(db_dir: Path, **settings) -> FlightRecorder:
    recorder = FlightRecorder(DebugConfig(enabled=True, db_dir=str(db_dir), **settings), "w1")
    recorder._open()
    return recorder


def write(recorder: FlightRecorder, events: int) -> None:
    """``events`` more events, written as one batch (one flush's worth)."""
    for _ in range(events):
        recorder.record("consumed", 0, recorder._next_id)
    batch, recorder._buffer = recorder._buffer, deque()
    recorder._write(batch)


def ids_by_file(db_dir: Path) -> dict[str, list[int]]:
    kept = {}
    for path in recorder_files(str(db_dir), "w1"):
        with contextlib.closing(sqlite3.connect(path)) as conn:
            kept[path.name] = [i for (i,) in conn.execute("SELECT id FROM events ORDER BY id")]
    return kept


def test_a_busy_recorder_at_its_limit_drops_its_oldest_file_whole_and_keeps_the_newest_events(tmp_path):
    keeps_the_newest_events_dropping_whole_files(tmp_path)


def test_a_clock_that_stands_still_or_steps_back_between_files_loses_no_new_event(tmp_path, monkeypatch):
    # Files are taken in name order: a new one named by a clock read earlier than the last one's
    # sorted first, and retention then trimmed the current file as if it were the oldest.
    readings = iter([1_764_149_405_999_999_000] * 3 + [1_764_149_405_999_999_000 - n * 10**9 for n in range(1, 100)])
    monkeypatch.setattr(recorder_module.time, "time_ns", lambda: next(readings))
    keeps_the_newest_events_dropping_whole_files(tmp_path)


def test_a_file_name_tells_the_time_to_the_microsecond_and_sorts_as_the_times_do():
    assert file_stamp(1_764_149_405_999_999) == "20251126T093005999999"
    assert file_stamp(1_764_149_406_000_000) == "20251126T093006000000"
    assert file_stamp(1_764_149_405_999_999) < file_stamp(1_764_149_406_000_000) < file_stamp(1_764_149_406_000_001)


def test_a_restart_after_the_clock_stepped_back_names_its_files_after_the_last_runs(tmp_path, monkeypatch):
    # The last run's clock was an hour fast; it was set right before the worker started again. Named
    # by the clock alone, the new run's files sorted before the last run's, and retention trimmed
    # the new run's current file while the stale one stayed.
    clock = [1_764_149_405_000_000_000 + 3_600 * 10**9]
    monkeypatch.setattr(recorder_module.time, "time_ns", lambda: clock[0])
    last_run = file_recorder(tmp_path, retention_max_events=8_000)
    write(last_run, 1_500)
    last_run._close()
    stale = Path(last_run.db_path).name
    clock[0] -= 3_600 * 10**9
    recorder = file_recorder(tmp_path, retention_max_events=8_000)
    try:
        assert recorder_files(str(tmp_path), "w1")[-1] == Path(recorder.db_path), "the new run's file sorts last"
        assert recorder._next_id == 1_501, "its ids go on from the last run's"
        assert recorder.describe()["events"] == 0, "the overview counts this run's events"
        for _ in range(8):  # 12,000 events of the new run: past the limit
            write(recorder, 1_500)
        files = ids_by_file(tmp_path)
        assert stale not in files, "the last run's file went first"
        kept = sorted(i for ids in files.values() for i in ids)
        assert kept == list(range(13_500 - len(kept) + 1, 13_501)), "the new run's newest events, none missing"
    finally:
        recorder._close()


def test_a_file_name_gives_back_its_time_and_other_names_none():
    assert stamp_of(Path("knarr-recorder-w1-20251126T093005999999.db")) == 1_764_149_405_999_999
    assert stamp_of(Path("knarr-recorder-w-1-20251126T093006000000.db")) == 1_764_149_406_000_000
    for name in ("knarr-recorder-w1-live.db", "knarr-recorder-w1-20251126T093005.db", "knarr-recorder-w1-2025x126T093005999999.db"):
        assert stamp_of(Path(name)) == 0, name


def keeps_the_newest_events_dropping_whole_files(tmp_path: Path) -> None:
    limit = 8_000  # a file then takes at most 2,000 events
    recorder = file_recorder(tmp_path, retention_max_events=limit)
    try:
        for _ in range(20):  # 30,000 events: the limit is passed after the sixth batch
            write(recorder, 1_500)
            files = ids_by_file(tmp_path)
            kept = sorted(i for ids in files.values() for i in ids)
            last = recorder._next_id - 1
            assert kept == list(range(last - len(kept) + 1, last + 1)), "the newest events, none missing"
            assert len(kept) <= limit
            if last > limit:
                assert len(kept) > limit - limit // 4, "at most a quarter of the limit goes too early"
            for name, ids in files.items():
                assert len(ids) <= 2_000, f"{name} holds more than its share"
                assert ids and (ids[0] - 1) % 2_000 == 0, f"{name} lost its oldest rows: only whole files go"
    finally:
        recorder._close()


def test_earlier_files_are_counted_once_not_at_every_write(tmp_path, monkeypatch):
    earlier = file_recorder(tmp_path, retention_max_events=8_000)
    write(earlier, 5_000)  # three files: 2,000, 2,000 and 1,000 events
    earlier._close()
    assert len(recorder_files(str(tmp_path), "w1")) == 3
    opened: list[str] = []
    real_connect = sqlite3.connect

    def counting_connect(database, *args, **kwargs):
        opened.append(str(database))
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(recorder_module.sqlite3, "connect", counting_connect)
    recorder = file_recorder(tmp_path, retention_max_events=8_000)  # the same worker, restarted
    try:
        for _ in range(12):
            write(recorder, 500)
    finally:
        recorder._close()
    counted = [name for name in opened if "mode=ro" in name]
    assert len(counted) == len(set(counted)) == 3, counted
    assert sum(len(ids) for ids in ids_by_file(tmp_path).values()) <= 8_000


def test_a_small_limit_keeps_at_most_that_many_of_the_newest_events_trimming_rows(tmp_path):
    recorder = file_recorder(tmp_path, retention_max_events=60)  # files take FILE_MIN_EVENTS, far over a quarter
    try:
        for _ in range(10):
            write(recorder, 25)
            kept = sorted(i for ids in ids_by_file(tmp_path).values() for i in ids)
            last = recorder._next_id - 1
            assert kept == list(range(last - len(kept) + 1, last + 1)) and len(kept) == min(60, last)
        write(recorder, FILE_MIN_EVENTS * 2 + 500)  # one batch bigger than two files
        files = ids_by_file(tmp_path)
        kept = sorted(i for ids in files.values() for i in ids)
        assert kept == list(range(recorder._next_id - 60, recorder._next_id))
        assert all(len(ids) <= FILE_MIN_EVENTS for ids in files.values())
    finally:
        recorder._close()


def test_the_memory_database_keeps_exactly_the_newest_events_up_to_the_limit(tmp_path):
    recorder = FlightRecorder(DebugConfig(enabled=True, db_dir="", retention_max_events=100), "w1")
    recorder._open()
    try:
        write(recorder, 70)
        write(recorder, 70)
        assert recorder._conn is not None
        kept = [i for (i,) in recorder._conn.execute("SELECT id FROM events ORDER BY id")]
        assert kept == list(range(41, 141))
    finally:
        recorder._conn.close()
