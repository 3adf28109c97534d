"""make bench-spawners' script (bench/spawners.py) runs every way of spawning at a tiny size and prints each row.

The native option runs knarr's native runner (built when knarr was installed); nothing here is timed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SPAWNERS_BENCH = Path(__file__).resolve().parents[2] / "bench" / "spawners.py"


def test_a_tiny_spawners_bench_runs_every_option_and_prints_its_table():
    proc = subprocess.run([sys.executable, str(SPAWNERS_BENCH), "--spawns", "300", "--rounds", "1"],
                          capture_output=True, text=True, timeout=600, cwd=SPAWNERS_BENCH.parents[1])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for row in ("loop: os.posix_spawnp on the event loop", "thread-os:", "thread-ctypes: knarr's spawner thread",
                "helper: a spawner process", "native: knarr's native runner (run_process)",
                "C floor: bench/spawn_floor.c"):
        assert row in proc.stdout, f"{row!r} missing from:\n{proc.stdout}"
