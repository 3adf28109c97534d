"""The flight recorder: every engine event, buffered in memory and written to SQLite off the event loop.

``record()`` is what the engine calls, on the event loop, for each event: it appends the event's
columns, its data as JSON, to a buffer and returns. Every ``flush_interval_seconds``, or as soon
as ``FLUSH_EARLY_EVENTS`` are waiting (a busy worker makes thousands a second), the buffer is
handed to the recorder's own thread, which writes it, rotates the database file every
``rotation_interval_minutes`` (or sooner, once it holds its share of ``retention_max_events``)
and applies retention (by age, and by total event count across this worker's files, a whole
file at a time). A buffer that fills up (``max_buffer``) drops its oldest events and counts
them; the pipeline never waits for the recorder.

Database files are ``knarr-recorder-<worker>-<UTC time>.db`` in ``db_dir``, with
``knarr-recorder-<worker>-live.db`` linking to the current one. ``db_dir: ''`` keeps one
database in memory instead (no rotation, retention by count only).

The buffer is one flat sequence of values, ``WIDTH`` per event, none of them a container: a
buffered event is nothing the cyclic garbage collector walks. Held as a tuple and a dict each,
ten thousand events between two writes made the collector take its young generation over and
over, walking them every time (about 5 µs per task in ``make bench-recorder``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import os
import sqlite3
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from knarr.config.models import DebugConfig
from knarr.debug import schema
from knarr.debug.files import file_prefix, file_stamp, merged_connection, recorder_files, stamp_of
from knarr.observability import metrics
from knarr.observability.logging import get_logger
from knarr.runtime.stopping import wait_event

log = get_logger(component="recorder")

TASK_END = frozenset(("task_finished", "task_failed"))
_POOL_EVENTS = frozenset(("task_started", "task_finished", "task_failed"))
SUBSCRIBER_QUEUE = 1_000  # events waiting for one WebSocket client; a slower client misses some
FLUSH_EARLY_EVENTS = 10_000  # buffered events that start a write before the interval is up
WRITE_CHUNK = 200  # events per INSERT (2,000 parameters; SQLite takes up to 32,766)
FILE_PARTS = 4  # a file holds at most 1/FILE_PARTS of retention_max_events: retention then drops whole files
FILE_MIN_EVENTS = 1_000  # ... or this many: a small retention_max_events must not start a file every few events
_NO_DATA: dict[str, Any] = {}  # shared, never changed: what an event without data stores
WIDTH = len(schema.BUFFERED_COLUMNS)  # values per buffered event
_now = time.time


class FlightRecorder:
    def __init__(self, config: DebugConfig, worker: str, *, cluster: str = "", consumer_group: str = "",
                 masked_config: dict[str, Any] | None = None, state: Callable[[], dict[str, Any]] | None = None) -> None:
        self.config = config
        self.worker = worker
        self.cluster = cluster
        self.consumer_group = consumer_group
        self.masked_config = masked_config or {}
        self.debug_url = config.debug_url
        self.state = state
        self.dropped = 0
        self.stored = 0  # events written so far
        self.running: dict[str, dict[str, Any]] = {}  # task_id -> what runs in a pool slot now
        self.db_path: str = ""  # the current file ('' in memory)
        self._buffer: deque[Any] = self._new_buffer()  # WIDTH values per event (schema.BUFFERED_COLUMNS)
        self._flush_at = min(FLUSH_EARLY_EVENTS, config.max_buffer // 2) * WIDTH  # (in values)
        self._flush_now = asyncio.Event()
        self._subscribers: set[asyncio.Queue] = set()
        self._next_id = 1
        self._first_id = 1  # this run's first event id (a restart goes on from the last run's ids)
        self._conn: sqlite3.Connection | None = None
        self._opened_at = 0.0
        self._stamp_us = 0  # the time in the current file's name, in microseconds since the epoch
        self._file_events = 0  # events in the current database (the memory one, or the current file)
        self._share = -(-config.retention_max_events // FILE_PARTS)  # retention may drop this many too many
        self._file_cap = max(FILE_MIN_EVENTS, self._share)  # events a file takes before the next starts
        self._counts: dict[str, int] = {}  # events in this worker's earlier files, counted once
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="knarr-recorder")
        self._loops: list[asyncio.Task] = []
        self._dropped_metric = metrics.recorder_dropped
        self._store = config.store_events
        self._event_min = config.event_min_duration_ms
        self._ws_min = config.ws_min_duration_ms
        self._log_min = config.log_min_duration_ms
        self._output_min = config.output_min_duration_ms if config.store_output else None
        self._free_slots: list[int] = []  # pool slot numbers given back, lowest first

    # --- the engine's side: cheap, on the event loop -------------------------------------------
    def record(self, kind: str, partition: int | None = None, offset: int | None = None, task_id: str | None = None,
               parent_task_id: str | None = None, duration_ms: float | None = None,
               data: dict[str, Any] | None = None) -> None:
        """Take one event. Never blocks, never raises into the pipeline for a full buffer.

        Its data becomes JSON here (orjson: a fraction of a microsecond, which the recorder's thread
        would take under the same GIL), so the buffer holds no container (the module's docstring).
        """
        if kind in _POOL_EVENTS:
            data = self._pool_slot(kind, task_id, partition, duration_ms, data)
        event_id = self._next_id
        self._next_id = event_id + 1
        ts = _now()
        if self._store and (duration_ms is None or duration_ms >= self._event_min):
            buffer = self._buffer
            if len(buffer) >= self._flush_at:
                self._flush_now.set()
                if len(buffer) == buffer.maxlen:  # full: the append below drops the oldest event's values
                    self.dropped += 1
                    self._dropped_metric.inc()
            buffer.extend((event_id, ts, kind, partition, offset, task_id, parent_task_id, duration_ms,
                           schema.dumps(data) if data else "{}"))
        if self._subscribers and (duration_ms is None or duration_ms >= self._ws_min):
            if data is None:
                data = _NO_DATA
            self._broadcast({"type": "event", "id": event_id, "ts": ts, "worker": self.worker, "kind": kind,
                             "partition": partition, "offset": offset, "task_id": task_id,
                             "parent_task_id": parent_task_id, "duration_ms": duration_ms,
                             "data": data})

    def _pool_slot(self, kind: str, task_id: str | None, partition: int | None, duration_ms: float | None,
                   data: dict[str, Any] | None) -> dict[str, Any] | None:
        """Which task runs in which pool slot (the overview shows it); slow tasks are logged."""
        if kind == "task_started":
            slot = heapq.heappop(self._free_slots) if self._free_slots else len(self.running)
            data = data if data is not None else {}  # built for the recorder alone (like _shown's): changed in place
            self.running[task_id or ""] = {"slot": slot, "task_id": task_id, "partition": partition,
                                           "args": data.pop("args", None), "started_at": time.time()}
            data["slot"] = slot  # the arguments are on task_queued already: the overview keeps them, the row does not
            return data
        entry = self.running.pop(task_id or "", None)
        if entry is not None:
            heapq.heappush(self._free_slots, entry["slot"])
        if duration_ms is not None and duration_ms >= self._log_min:
            log.info("slow task", task_id=task_id, partition=partition, duration_ms=round(duration_ms, 1),
                     outcome=kind, exit_code=data.get("exit_code") if data else None)
        return self._shown(kind, duration_ms, data)  # stdout/stderr kept only as the thresholds allow

    def _shown(self, kind: str, duration_ms: float | None, data: dict[str, Any] | None) -> dict[str, Any]:
        """Event data as stored: a task's stdout/stderr only when store_output and the thresholds allow.

        The engine builds each event's data for the recorder alone, so the output is dropped in place.
        """
        if not data:
            return _NO_DATA
        if kind in TASK_END and (self._output_min is None or (kind == "task_finished"
                                                              and (duration_ms or 0) < self._output_min)):
            data.pop("stdout", None)
            data.pop("stderr", None)
        return data

    # --- live feed -------------------------------------------------------------------------------
    def subscribe(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self._subscribers.discard(queue)

    def _broadcast(self, event: dict[str, Any]) -> None:
        for queue in self._subscribers:
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._in_thread(self._open)
        self._loops = [asyncio.create_task(self._every(self.config.flush_interval_seconds, self.flush, self._flush_now),
                                           name="knarr-recorder-flush")]
        if self.config.store_state and self.state is not None:
            self._loops.append(asyncio.create_task(self._every(self.config.state_sync_interval_seconds, self.sync_state),
                                                   name="knarr-recorder-state"))
        log.info("flight recorder started", db=self.db_path or "(memory)")

    async def stop(self) -> None:
        """Write what is buffered, end the background work, remove the live link."""
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops = []
        try:
            await self.flush()
        finally:
            await self._in_thread(self._close)
            self._thread.shutdown(wait=True)

    async def _every(self, seconds: float, work: Callable[[], Any], early: asyncio.Event | None = None) -> None:
        """``work()`` every ``seconds``, or sooner when ``early`` is set."""
        while True:
            if early is None:
                await asyncio.sleep(seconds)
            else:
                await wait_event(early, seconds)
                early.clear()
            try:
                await work()
            except Exception as exc:  # a full disk must not stop the worker: say so and go on
                log.error("flight recorder could not write", error=f"{type(exc).__name__}: {exc}")

    async def flush(self) -> None:
        if not self._buffer:
            await self._in_thread(self._maintain)
            return
        batch, self._buffer = self._buffer, self._new_buffer()
        await self._in_thread(self._write, batch)

    async def sync_state(self) -> None:
        assert self.state is not None
        state = self.state()
        await self._in_thread(self._write_state, time.time(), state)

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    # --- reads (the API) -------------------------------------------------------------------------
    async def read(self, query: Callable[..., Any], *args: Any) -> Any:
        """Run ``query(conn, *args)`` over every database file of this worker (or the memory one)."""
        if not self.config.db_dir:
            return await self._in_thread(self._read_memory, query, args)
        paths = [str(p) for p in recorder_files(self.config.db_dir, self.worker)]
        return await asyncio.to_thread(_read_files, paths, query, args)

    def _read_memory(self, query: Callable[..., Any], args: tuple) -> Any:
        assert self._conn is not None
        return query(self._conn, *args)

    async def backup(self, target: str) -> None:
        """A consistent copy of the current database at ``target`` (SQLite's online backup)."""
        await self.flush()
        await self._in_thread(self._backup, target)

    def _backup(self, target: str) -> None:
        assert self._conn is not None
        with contextlib.closing(sqlite3.connect(target)) as out:
            self._conn.backup(out)

    # --- the recorder's thread -------------------------------------------------------------------
    def _open(self) -> None:
        db_dir = self.config.db_dir
        if not db_dir:
            self._conn = sqlite3.connect(":memory:", check_same_thread=False)
            self.db_path = ""
        else:
            Path(db_dir).mkdir(parents=True, exist_ok=True)
            # Retention and the readers take the files in name order: a new file must sort after the last one,
            # even when the clock read the same microsecond or stepped back since, a restart between them too.
            # A new run's ids go on from the last run's too: the readers order a worker's events by id.
            earlier = recorder_files(db_dir, self.worker) if not self._stamp_us else []
            if earlier:
                newest = max(earlier, key=stamp_of)
                self._stamp_us = stamp_of(newest)
                last_id, self._counts[str(newest)] = _last_id_and_count(newest)  # (retention counts it)
                self._next_id = self._first_id = max(self._next_id, last_id + 1)
            self._stamp_us = max(time.time_ns() // 1000, self._stamp_us + 1)
            path = Path(db_dir) / f"{file_prefix(self.worker)}{file_stamp(self._stamp_us)}.db"
            self._conn = sqlite3.connect(str(path), check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self.db_path = str(path)
            self._link_live(path)
        schema.create(self._conn)
        row = self._conn.execute("SELECT max(id), count(*) FROM events").fetchone()
        if row[0] is not None and row[0] >= self._next_id:
            # Only a database that has events already moves the ids on. A rotation's new file has none,
            # and this runs on the recorder's thread while the loop takes ids: written back, a stale
            # _next_id would give two events one id (and fail the write of every chunk holding both).
            self._next_id = row[0] + 1
        self._file_events = row[1]
        self._opened_at = time.monotonic()
        self._write_config()
        self._conn.commit()

    def _link_live(self, path: Path) -> None:
        live = path.parent / f"{file_prefix(self.worker)}live.db"
        tmp = live.with_suffix(".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(path.name)
        os.replace(tmp, live)

    def _write_config(self) -> None:
        if not self.config.store_config or self._conn is None:
            return
        self._conn.execute(schema.UPSERT_CONFIG, (self.worker, self.cluster, self.consumer_group, self.debug_url,
                                                  self.db_path, schema.dumps(self.masked_config), time.time()))

    def _new_buffer(self) -> deque[Any]:
        return deque(maxlen=self.config.max_buffer * WIDTH)

    def _write(self, batch: deque[Any]) -> None:
        """Insert a batch ``WRITE_CHUNK`` rows per statement; a file that reaches its share of the
        events kept is closed and the rest goes to a new one.

        SQLite lets go of the GIL around each step of a statement: row-by-row inserts handed it
        back and forth with the event loop at every row, and under load that convoy cost more
        than the writing. A statement of many rows holds the GIL only while its parameters are
        bound (a fraction of a millisecond) and inserts them all without it.
        """
        values = list(batch)
        batch.clear()  # the events are freed with ``values``, on this thread, not by the loop when flush() returns
        events, done = len(values) // WIDTH, 0
        while done < events:
            if self.config.db_dir and self._file_events >= self._file_cap:
                self._rotate()
            assert self._conn is not None
            room = self._file_cap - self._file_events if self.config.db_dir else events
            end = min(events, done + max(1, room))
            with self._conn:
                for start in range(done, end, WRITE_CHUNK):
                    rows = min(WRITE_CHUNK, end - start)
                    self._conn.execute(schema.insert_events(rows),
                                       [self.worker, *values[start * WIDTH:(start + rows) * WIDTH]])
            self.stored += end - done
            self._file_events += end - done
            done = end
        self._maintain()

    def _write_state(self, ts: float, state: dict[str, Any]) -> None:
        assert self._conn is not None
        with self._conn:
            self._conn.execute(schema.INSERT_STATE, (ts, self.worker, schema.dumps(state)))
            self._write_config()  # updated_at says the worker is alive

    def _maintain(self) -> None:
        """Rotation when the file is old enough, then retention."""
        if self.config.db_dir and time.monotonic() - self._opened_at >= self.config.rotation_interval_minutes * 60:
            self._rotate()
        self._retain()

    def _rotate(self) -> None:
        """Close the current file (its count is known) and start the next."""
        self._counts[self.db_path] = self._file_events
        self._close(keep_link=True)
        self._open()

    def _retain(self) -> None:
        """Retention by age, then by count: the oldest events go, a whole earlier file at a time.

        A busy worker reaches ``retention_max_events`` within seconds and stays there, so this
        runs at every write. Deleting the oldest rows cost about as much as writing them; since
        ``_write`` fills a file with at most a ``FILE_PARTS``-th of the events kept, dropping the
        oldest file instead keeps more than (1 - 1/FILE_PARTS) of ``retention_max_events``, and
        at most all of it. Rows are deleted only where that would drop too many: from a file
        bigger than its share (a small ``retention_max_events``, whose files hold
        ``FILE_MIN_EVENTS``, or a file written under other settings), and from the one database
        kept in memory. Earlier files are counted once, not at every write.
        """
        assert self._conn is not None
        cfg = self.config
        if not cfg.db_dir:
            excess = self._file_events - cfg.retention_max_events
            _trim(self._conn, excess)
            self._file_events -= max(0, excess)
            return
        files = recorder_files(cfg.db_dir, self.worker)  # oldest first; the current one is last
        cutoff = time.time() - cfg.retention_hours * 3600
        for path in files[:-1]:
            if str(path) != self.db_path and path.stat().st_mtime < cutoff:
                self._drop(path)
        files = recorder_files(cfg.db_dir, self.worker)
        counts = [(p, self._count(p)) for p in files]
        excess = sum(n for _, n in counts) - cfg.retention_max_events
        for path, count in counts:
            if excess <= 0:
                break
            current = str(path) == self.db_path
            if not current and count < excess + self._share:  # the whole file: fewer than _share too many
                self._drop(path)
                excess -= count
                continue
            cut = min(count, excess)
            if current:
                _trim(self._conn, cut)
                self._file_events -= cut
            else:
                with contextlib.closing(sqlite3.connect(str(path))) as conn:
                    _trim(conn, cut)
                self._counts[str(path)] = count - cut
            excess -= cut

    def _count(self, path: Path) -> int:
        key = str(path)
        if key == self.db_path and self._conn is not None:
            return self._file_events
        if key not in self._counts:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
                try:
                    self._counts[key] = conn.execute("SELECT count(*) FROM events").fetchone()[0]
                except sqlite3.DatabaseError:
                    self._counts[key] = 0
        return self._counts[key]

    def _drop(self, path: Path) -> None:
        self._counts.pop(str(path), None)
        _unlink_db(path)

    def _close(self, keep_link: bool = False) -> None:
        if self._conn is None or not self.config.db_dir:
            return  # the memory database lives as long as the recorder: the API still reads it
        self._conn.close()
        self._conn = None
        if not keep_link:
            with contextlib.suppress(FileNotFoundError):
                (Path(self.config.db_dir) / f"{file_prefix(self.worker)}live.db").unlink()

    # --- what the overview shows about the recorder ----------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {"events": self._next_id - self._first_id, "stored": self.stored, "buffered": len(self._buffer) // WIDTH,
                "dropped": self.dropped, "db_path": self.db_path}


def _last_id_and_count(path: Path) -> tuple[int, int]:
    """The newest event id in a recorder file and how many events it holds; 0s when it cannot be read."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            last, count = conn.execute("SELECT max(id), count(*) FROM events").fetchone()
            return last or 0, count
    except sqlite3.Error:
        return 0, 0


def _trim(conn: sqlite3.Connection, excess: int) -> None:
    """Delete the ``excess`` oldest events of one database."""
    if excess <= 0:
        return
    with conn:
        conn.execute("DELETE FROM events WHERE id IN (SELECT id FROM events ORDER BY id LIMIT ?)", (excess,))


def _unlink_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}{suffix}").unlink()


def _read_files(paths: list[str], query: Callable[..., Any], args: tuple) -> Any:
    with contextlib.closing(merged_connection(paths)) as conn:
        return query(conn, *args)
