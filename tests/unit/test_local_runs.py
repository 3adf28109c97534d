"""`knarr run` on the local source: what it logs, what it counts, the metrics it fills, how it ends."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client import REGISTRY

from knarr.config import config_from_dict
from knarr.errors import ExitCode
from knarr.loader import load_handler_class
from knarr.engine.worker import Worker

FAILING = '''
import knarr

class Handler(knarr.BaseHandler):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(task_id=f"job-{m.offset}", args=["-c", 'echo "cannot parse record $0" >&2; exit 3', str(m.offset)],
                                   source_offsets=[m.offset]) for m in messages]

    async def on_task_complete(self, result):
        return knarr.CollectResult(files=[knarr.FilePayload(path="out.jsonl", data={"ok": True})])
'''

SLEEPING = '''
import knarr

class Handler(knarr.BaseHandler):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=["30"], source_offsets=[m.offset]) for m in messages]

    async def on_task_complete(self, result):
        return None
'''


def pipeline(tmp_path: Path, handler: str, lines: int, **executor: object) -> Path:
    (tmp_path / "handler.py").write_text(textwrap.dedent(handler))
    (tmp_path / "input.jsonl").write_text("".join(json.dumps({"n": i}) + "\n" for i in range(lines)))
    config = {
        "handler": "handler.py:Handler",
        "source": {"type": "local", "local": {"path": "input.jsonl", "partitions": 2}},
        "executor": {"binary_path": "/bin/sh", "max_executors": 2, **executor},
        "sinks": {"filesystem": {"out": {"base_path": "out"}}},
        "dlq": {"path": "out/dlq.jsonl"},
        "metrics": {"enabled": False},
        "logging": {"level": "INFO", "format": "console"},
    }
    (tmp_path / "knarr.yaml").write_text(json.dumps(config))
    return tmp_path / "knarr.yaml"


def run(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", str(config)],
                          capture_output=True, text=True, timeout=120)


def test_a_failed_task_is_logged_at_warning_with_its_offsets_exit_code_and_stderr(tmp_path):
    proc = run(pipeline(tmp_path, FAILING, lines=1))
    [line] = [line for line in proc.stderr.splitlines() if "task failed" in line]
    assert "[warning" in line
    for part in ("task_id=job-0", "source_offsets=[0]", "partition=0", "exit_code=3", "action=skipped",
                 "stderr='cannot parse record 0'"):
        assert part in line, line


def test_when_every_task_fails_the_log_shows_a_burst_and_how_many_more_failed(tmp_path):
    proc = run(pipeline(tmp_path, FAILING, lines=40))
    failures = [line for line in proc.stderr.splitlines() if "task failed" in line]
    assert len(failures) == 10
    assert "30 more task failures not logged" in proc.stderr


def test_a_run_whose_tasks_all_failed_ends_with_exit_code_4_and_a_summary_counting_them(tmp_path):
    proc = run(pipeline(tmp_path, FAILING, lines=40))
    assert proc.returncode == ExitCode.WORK_FAILED
    assert "knarr run done, with failed work" in proc.stderr
    assert "tasks                40   0 succeeded, 40 failed, 0 replaced" in proc.stderr
    assert "exit code 4" in proc.stderr


def test_local_runs_name_the_file_as_their_source_not_a_kafka_topic(tmp_path):
    proc = run(pipeline(tmp_path, FAILING, lines=2))
    [started] = [line for line in proc.stderr.splitlines() if "worker started" in line]
    assert f"topic={tmp_path / 'input.jsonl'}" in started
    assert "input-events" not in proc.stderr and "consumer_group" not in proc.stderr


def test_backpressure_changes_are_logged_once_per_kind_however_often_they_flap(tmp_path):
    config = pipeline(tmp_path, FAILING, lines=600, backpressure_high_multiplier=4, backpressure_low_multiplier=1)
    debug = json.loads(config.read_text())
    debug["logging"]["level"] = "DEBUG"
    config.write_text(json.dumps(debug))
    proc = run(config)
    holds = [line for line in proc.stderr.splitlines() if "backpressure on: holding" in line]
    assert len(holds) > 3, "the scenario should make backpressure flap"
    assert len([line for line in holds if "[info" in line]) == 1
    assert len([line for line in proc.stderr.splitlines() if "backpressure off" in line and "[info" in line]) == 1


def _sample(name: str, partition: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"partition": partition})


def test_a_local_run_fills_the_committed_offset_and_lag_metrics(tmp_path):
    config = pipeline(tmp_path, FAILING, lines=6)
    from knarr.config import load_config

    loaded = load_config(config, env={})
    worker = Worker(loaded, load_handler_class(loaded.handler)())
    assert asyncio.run(worker.run()) == ExitCode.OK
    assert _sample("knarr_committed_offset", "0") == 3 and _sample("knarr_committed_offset", "1") == 3
    assert _sample("knarr_consumer_lag", "0") == 0 and _sample("knarr_consumer_lag", "1") == 0
    assert _sample("knarr_offsets_committed_total", "0") >= 1


def test_a_stop_whose_drain_times_out_exits_with_code_5(tmp_path):
    (tmp_path / "input.jsonl").write_text('{"n": 1}\n')
    (tmp_path / "handler.py").write_text(textwrap.dedent(SLEEPING))
    config = config_from_dict({
        "source": {"type": "local", "local": {"path": str(tmp_path / "input.jsonl")}},
        "executor": {"binary_path": "/bin/sleep", "drain_timeout_seconds": 0.5},
        "sinks": {"filesystem": {"out": {"base_path": str(tmp_path / "out")}}},
        "dlq": {"path": str(tmp_path / "dlq.jsonl")},
        "metrics": {"enabled": False},
        "logging": {"level": "ERROR"},
    })
    worker = Worker(config, load_handler_class(f"{tmp_path / 'handler.py'}:Handler")())

    async def scenario() -> int:
        run = asyncio.create_task(worker.run())
        deadline = asyncio.get_running_loop().time() + 30
        while worker.stats.tasks == 0:  # poll until the sleeping task is in flight
            assert asyncio.get_running_loop().time() < deadline, "the task never started"
            await asyncio.sleep(0.02)
        worker.stop()
        return await run

    assert asyncio.run(scenario()) == ExitCode.DRAIN_INCOMPLETE


LOOP_REPORTING = '''
import asyncio
import knarr

class Handler(knarr.BaseHandler):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=["-c", "true"], source_offsets=[m.offset]) for m in messages]

    async def on_task_complete(self, result):
        loop = type(asyncio.get_running_loop())
        return knarr.CollectResult(files=[knarr.FilePayload(path="loops.jsonl", data={"loop": loop.__module__})])
'''


def test_knarr_run_runs_on_uvloop_unless_the_config_asks_for_asyncio(tmp_path):
    for choice, expected in ((None, "uvloop"), ("asyncio", "asyncio.unix_events")):
        base = tmp_path / (choice or "default")
        base.mkdir()
        config = pipeline(base, LOOP_REPORTING, 4)
        if choice:
            config.write_text(json.dumps({**json.loads(config.read_text()), "event_loop": choice}))
        proc = run(config)
        assert proc.returncode == ExitCode.OK, proc.stderr
        loops = {json.loads(line)["loop"] for line in (base / "out" / "loops.jsonl").read_text().splitlines()}
        assert loops == {expected}


GC_REPORTING = '''
import gc
import knarr

class Handler(knarr.BaseHandler):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=["-c", "true"], source_offsets=[m.offset]) for m in messages]

    async def on_task_complete(self, result):
        data = {"threshold": gc.get_threshold()[0], "frozen": gc.get_freeze_count() > 0}
        return knarr.CollectResult(files=[knarr.FilePayload(path="gc.jsonl", data=data)])
'''


def test_knarr_run_collects_garbage_as_gc_threshold_says_with_start_up_frozen(tmp_path):
    for threshold, expected in ((None, 10_000), (700, 700)):
        base = tmp_path / str(threshold)
        base.mkdir()
        config = pipeline(base, GC_REPORTING, 2)
        if threshold is not None:
            config.write_text(json.dumps({**json.loads(config.read_text()), "gc_threshold": threshold}))
        proc = run(config)
        assert proc.returncode == ExitCode.OK, proc.stderr
        seen = [json.loads(line) for line in (base / "out" / "gc.jsonl").read_text().splitlines()]
        assert seen == [{"threshold": expected, "frozen": True}] * 2


def test_a_negative_gc_threshold_is_refused(tmp_path):
    config = pipeline(tmp_path, GC_REPORTING, 1)
    config.write_text(json.dumps({**json.loads(config.read_text()), "gc_threshold": -1}))
    proc = run(config)
    assert proc.returncode == ExitCode.USAGE
    assert "gc_threshold" in proc.stderr and "greater than or equal to 0" in proc.stderr


def test_an_unknown_event_loop_is_refused_naming_the_choices(tmp_path):
    config = pipeline(tmp_path, LOOP_REPORTING, 1)
    config.write_text(json.dumps({**json.loads(config.read_text()), "event_loop": "trio"}))
    proc = run(config)
    assert proc.returncode == ExitCode.USAGE
    assert "event_loop" in proc.stderr and "'uvloop' or 'asyncio'" in proc.stderr
