"""A sink server run by one of the hack/services scripts: start it, stop it, freeze it, thaw it.

The scripts keep each instance's state in a directory of its own, so a fault test gets a private
server (``private_state_dir``) and never disturbs the one the rest of the suite shares. Private
state lives under ``<repo>/.cache`` rather than pytest's tmp_path, because PostgreSQL runs as the
``postgres`` user when the tests run as root, and pytest's directories are closed to other users.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICES = REPO_ROOT / "hack" / "services"

UP_TIMEOUT_S = 300  # a first `up` on a fresh machine installs the server with apt-get


class ServiceUnavailable(RuntimeError):
    """A sink server could not be started or reached."""


def private_state_dir(name: str) -> Path:
    return REPO_ROOT / ".cache" / f"{name}-private-{secrets.token_hex(4)}"


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after the command name: state ppid ...
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return found


class ScriptedServer:
    """One instance of ``hack/services/<name>.sh``; subclasses say which processes make the server."""

    name = ""
    variable = ""  # the NAME=value line `up` prints
    state_env = ""  # the script's variable naming another state directory
    log_name = ""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.state_dir = state_dir or REPO_ROOT / ".cache" / self.name
        self.address = ""

    @property
    def script(self) -> Path:
        return SERVICES / f"{self.name}.sh"

    def _run(self, command: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, self.state_env: str(self.state_dir)}
        try:
            return subprocess.run(["bash", str(self.script), command], capture_output=True, text=True,
                                  timeout=UP_TIMEOUT_S, check=False, env=env)
        except subprocess.TimeoutExpired as exc:
            raise ServiceUnavailable(f"`{self.script.name} {command}` did not finish within {UP_TIMEOUT_S}s:\n"
                                     f"{exc.stderr or ''}\n--- server log ---\n{self.log_tail()}") from exc

    def log_tail(self, lines: int = 60) -> str:
        path = self.state_dir / self.log_name
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(no server log at {path}: {exc})"

    def start(self) -> str:
        """Start the server, or reuse it if it runs; returns its address (DSN, URL)."""
        proc = self._run("up")
        for line in proc.stdout.splitlines():
            if line.startswith(f"{self.variable}=") and proc.returncode == 0:
                self.address = line.partition("=")[2].strip()
                return self.address
        raise ServiceUnavailable(
            f"`{self.script.relative_to(REPO_ROOT)} up` failed (exit {proc.returncode}) for {self.state_dir}; "
            f"inspect with `{self.state_env}={self.state_dir} {self.script.relative_to(REPO_ROOT)} logs`.\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}\n--- server log ---\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Stop the server for real (the script's `down`); `start` brings it back on the same port."""
        proc = self._run("down")
        if proc.returncode != 0:
            raise ServiceUnavailable(f"`{self.script.name} down` failed (exit {proc.returncode}):\n{proc.stderr}")

    def pids(self) -> list[int]:
        raise NotImplementedError

    def freeze(self) -> None:
        """SIGSTOP every process of the server: it keeps its connections and answers nothing."""
        for pid in self.pids():
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    @contextmanager
    def frozen(self) -> Iterator[None]:
        self.freeze()
        try:
            yield
        finally:
            self.thaw()

    def remove(self) -> None:
        """Stop it and delete its state (private instances only)."""
        self.thaw()
        try:
            self.stop()
        finally:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def private_session_server(server: ScriptedServer, what: str) -> Iterator[ScriptedServer]:
    """Body of a session fixture: a private server for the fault tests, removed at the end; a server
    that cannot start fails the tests that need it, with its log tail."""
    import pytest

    try:
        server.start()
    except ServiceUnavailable as exc:
        server.remove()
        pytest.fail(f"private {what} unavailable:\n{exc}", pytrace=False)
    try:
        yield server
    finally:
        server.remove()


def kept_running(server: ScriptedServer) -> Iterator[ScriptedServer]:
    """Body of a per-test fixture: the server runs and answers when the test starts, and again after
    it, whatever the test did to it (stopped it, froze it)."""
    server.thaw()
    server.start()
    try:
        yield server
    finally:
        server.thaw()
        server.start()
