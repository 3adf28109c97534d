"""A progress bar for runs over a finite input, on a terminal only, then a one-screen summary."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def local_pipeline(tmp_path: Path, lines: int = 120) -> Path:
    (tmp_path / "input.jsonl").write_text("".join(json.dumps({"id": str(i), "text": "a b c"}) + "\n" for i in range(lines)))
    config = {
        "handler": f"{ROOT}/examples/quickstart/handler.py:WordCounter",
        "source": {"type": "local", "local": {"path": "input.jsonl"}},
        "executor": {"binary_path": "/usr/bin/wc", "max_executors": 2, "window_size": 10},
        "sinks": {"filesystem": {"results": {"base_path": "out"}}},
        "dlq": {"path": "out/dlq.jsonl"},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING"},
    }
    (tmp_path / "knarr.yaml").write_text(json.dumps(config))
    return tmp_path / "knarr.yaml"


def run_on_a_terminal(*args: str, columns: int = 100) -> tuple[int, str]:
    """Run knarr with stdout and stderr on a pseudo-terminal; return its exit code and what it drew."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "knarr.cli", *args], stdout=follower, stderr=follower)
    os.close(follower)
    screen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        screen += chunk
    os.close(leader)
    return proc.wait(timeout=60), screen.decode(errors="replace")


def test_on_a_terminal_knarr_run_draws_a_bar_up_to_every_message_then_the_summary(tmp_path):
    code, screen = run_on_a_terminal("run", "--config", str(local_pipeline(tmp_path)))
    assert code == 0, screen
    assert "\rmessages: 100%|" in screen
    assert "120/120 msg" in screen and "tasks 120, failed 0" in screen
    summary = screen[screen.index("knarr run done"):]
    assert "messages            120" in summary
    assert len(summary.splitlines()) <= 10  # one screen


def test_without_a_terminal_there_is_no_bar_only_the_summary(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", str(local_pipeline(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "\r" not in proc.stderr and "%|" not in proc.stderr
    assert proc.stderr.startswith("knarr run done")


def test_no_progress_turns_the_bar_off_on_a_terminal_too(tmp_path):
    code, screen = run_on_a_terminal("run", "--no-progress", "--config", str(local_pipeline(tmp_path)))
    assert code == 0
    assert "%|" not in screen and "knarr run done" in screen
