"""`knarr dlq replay` on a file DLQ, without any broker: waiting for a sink that is down, the progress bar."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from knarr import PluginPayload
from knarr.api.payloads import DeliveryError
from knarr.sinks.dlq import FileDeadLetterQueue


def dead_letters(path: Path, count: int) -> None:
    dlq = FileDeadLetterQueue(str(path), "in")
    for i in range(count):
        asyncio.run(dlq.send(DeliveryError(sink_name="audit", sink_type="test-jsonl", error="PermanentSinkError: no",
                                           payloads=[PluginPayload(data={"i": i}, meta={"m": i})], offsets=[i]), 0))


def setup(tmp_path: Path, count: int, **options) -> Path:
    dead_letters(tmp_path / "dlq.jsonl", count)
    config = tmp_path / "knarr.yaml"
    config.write_text(yaml.safe_dump({
        "sinks": {"plugin": {"audit": {"type": "test-jsonl", "options": {"path": str(tmp_path / "audit.jsonl"), **options}}}},
        "dlq": {"path": str(tmp_path / "dlq.jsonl")},
        "executor": {"retry_backoff_base_seconds": 0.05, "retry_backoff_max_seconds": 0.2},
    }))
    return config


def command(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "knarr.cli", "dlq", "replay", "--config", str(config), *args]


def received(tmp_path: Path) -> list[dict]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_replay_waits_for_a_sink_that_is_down_and_delivers_once_it_is_back(tmp_path):
    switch = tmp_path / "down"
    switch.touch()
    config = setup(tmp_path, 2, unavailable_while=str(switch))
    proc = subprocess.Popen(command(config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "audit.jsonl").exists():  # the sink connects (creates its file), then is waited for
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the replay never connected the sink"
            time.sleep(0.05)
        time.sleep(1.0)
        assert proc.poll() is None  # still waiting, nothing refused or dead-lettered
        switch.unlink()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "sink unavailable; deliveries wait and retry" in err
    assert "  re-delivered      2 records (2 payloads) to test-jsonl sink 'audit'" in out
    assert received(tmp_path) == [{"sink": "audit", "data": {"i": i}, "meta": {"m": i}} for i in range(2)]


def run_on_a_terminal(args: list[str]) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal (as a person at a terminal has it); returns the exit code and stderr."""
    main, secondary = os.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=secondary, text=True)
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(main)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


def test_the_progress_bar_shows_on_a_terminal_and_not_with_no_progress(tmp_path):
    config = setup(tmp_path, 3)
    code, stderr = run_on_a_terminal(command(config))
    assert code == 0 and "replay: 100%" in stderr and "3/3 rec" in stderr
    code, stderr = run_on_a_terminal(command(config, "--again", "--no-progress"))
    assert code == 0 and "replay:" not in stderr
    assert len(received(tmp_path)) == 6


def test_the_dry_run_of_a_file_dlq_changes_nothing(tmp_path):
    config = setup(tmp_path, 3)
    before = (tmp_path / "dlq.jsonl").read_bytes()
    proc = subprocess.run(command(config, "--dry-run"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"knarr dlq replay --dry-run: 3 of 3 records match in file {str(tmp_path / 'dlq.jsonl')!r}; nothing was sent",
        "  would re-deliver 3 records (3 payloads) to test-jsonl sink 'audit'"]
    assert (tmp_path / "dlq.jsonl").read_bytes() == before
    assert not (tmp_path / "dlq.jsonl.replayed").exists() and not (tmp_path / "audit.jsonl").exists()


def test_inspect_reads_the_dlq_of_a_config_whose_plug_in_is_not_installed_here_but_replay_refuses_it(tmp_path):
    config = setup(tmp_path, 2)
    data = yaml.safe_load(config.read_text())
    data["sinks"]["plugin"]["audit"]["type"] = "installed-elsewhere"
    config.write_text(yaml.safe_dump(data))
    inspect = subprocess.run([sys.executable, "-m", "knarr.cli", "dlq", "inspect", "--config", str(config), "--json"],
                             capture_output=True, text=True, timeout=60)
    assert inspect.returncode == 0, inspect.stderr
    assert json.loads(inspect.stdout)["by_sink"] == {"test-jsonl/audit": 2}
    replay = subprocess.run(command(config), capture_output=True, text=True, timeout=60)
    assert replay.returncode == 2
    assert "sinks.plugin.audit.type: no installed plug-in sink is called 'installed-elsewhere'" in replay.stderr
