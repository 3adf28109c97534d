"""The C spawn floor: bench/spawn_floor.c built and run, the same spawns as the engine's from C."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from workload import BINARY, TASK_ENV, Figure

HERE = Path(__file__).resolve().parent


def build_c(source: Path, exe: Path) -> Path | None:
    """``source`` compiled to ``exe`` (-O2) by cc or gcc; None without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    subprocess.run([compiler, "-O2", "-o", str(exe), str(source)], check=True)
    return exe


def spawn_floor_c(binary: str, count: int, concurrency: int, env: dict[str, str]) -> tuple[float, float, float] | None:
    """``binary`` spawned ``count`` times from C (bench/spawn_floor.c), ``concurrency`` at a time, each child with
    the environment ``env``: the parent's CPU per spawn in microseconds, spawns per second and the children's CPU per
    spawn; None without a C compiler."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_c(HERE / "spawn_floor.c", Path(tmp) / "spawn_floor")
        if exe is None:
            return None
        out = subprocess.run([str(exe), binary, str(count), str(concurrency)], check=True, env=env,
                             capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def c_spawn_floor(count: int, concurrency: int) -> Figure | None:
    """The same spawns from C (bench/spawn_floor.c): what spawning costs a parent in any language."""
    measured = spawn_floor_c(BINARY, count, concurrency, TASK_ENV)
    if measured is None:
        return None
    cpu_us, rate, children_us = measured
    return Figure(count, count / rate, cpu_us * count / 1e6, children_cpu_seconds=children_us * count / 1e6)
