"""bench/wake_cost.py runs at a tiny size and prints one row per gap; nothing is timed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "wake_cost.py"


def test_it_prints_the_cost_of_a_waking_write_for_every_gap_asked():
    run = subprocess.run([sys.executable, str(SCRIPT), "--gap-us", "0", "30", "--writes", "400", "--programs", "2", "--together", "2"],
                         capture_output=True, text=True, timeout=60, check=True)
    rows = re.findall(r"writer's gap +(\d+) us: +([\d.]+) us per write", run.stdout)
    assert [gap for gap, _ in rows] == ["0", "30"], run.stdout
    assert all(float(cost) > 0 for _, cost in rows)
    assert "2 programs under SCHED_BATCH, 15 us of work per request, 2 written at a time" in run.stdout
