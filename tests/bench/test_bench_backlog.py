"""make bench-backlog's script (bench/backlog.py) runs both settings at a tiny size and prints each row; nothing is timed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BACKLOG_BENCH = Path(__file__).resolve().parents[2] / "bench" / "backlog.py"

pytestmark = pytest.mark.kafka


def test_a_tiny_backlog_bench_runs_both_settings_and_prints_their_rows(kafka_bootstrap: str):
    # The window counts from the worker's start: on a loaded machine start-up and the group join alone
    # took more than 2 s (nothing consumed, so nothing committed), so it gets 10.
    proc = subprocess.run([sys.executable, str(BACKLOG_BENCH), "--messages", "4000", "--partitions", "2",
                           "--seconds", "10", "--rounds", "1"],
                          capture_output=True, text=True, timeout=600, cwd=BACKLOG_BENCH.parents[1])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "queued.min.messages 2000 (librdkafka's default 100000)" in proc.stdout, proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] in (["knarr"], ["librdkafka"])
            and "MiB" in line and "of 2" in line]
    assert sorted(row[0] for row in rows) == ["knarr", "librdkafka"], proc.stdout
    for row in rows:
        assert float(row[1]) > 0 and int(row[5]) > 0, f"no RSS or nothing committed: {row}"
