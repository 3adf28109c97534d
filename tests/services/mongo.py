"""A real MongoDB-wire server for the mongo sink's tests: FerretDB, run by ``hack/services/mongo.sh``.

``mongo_uri`` is the shared server (``KNARR_TEST_MONGO_URI`` when set, else ``mongo.sh up``,
which builds FerretDB once); a test that cannot get it fails with the server's log tail, it is
never skipped. ``mongo_database`` is a database of the test's own, dropped afterwards.
``private_mongo`` is a second server with its own state directory, for the tests that kill,
stop and restart it, so the shared one is never disturbed.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

REPO_ROOT = Path(__file__).resolve().parents[2]
MONGO_SH = REPO_ROOT / "hack" / "services" / "mongo.sh"
SHARED_STATE = REPO_ROOT / ".cache" / "mongo"

# A cold `up` downloads FerretDB's module and dependencies and compiles it (~2 minutes on 2 cores).
_UP_TIMEOUT_S = 900


class MongoUnavailable(RuntimeError):
    """The local FerretDB could not be started or reached."""


def _log_tail(state_dir: Path, lines: int = 60) -> str:
    log = state_dir / "server.log"
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no server log at {log}: {exc})"


def mongo_sh(command: str, state_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if state_dir is not None:
        env["KNARR_MONGO_STATE_DIR"] = str(state_dir)
    try:
        return subprocess.run(["bash", str(MONGO_SH), command], capture_output=True, text=True,
                              timeout=_UP_TIMEOUT_S, check=False, env=env)
    except subprocess.TimeoutExpired as exc:
        raise MongoUnavailable(f"`mongo.sh {command}` did not finish within {_UP_TIMEOUT_S}s\n"
                               f"--- stderr ---\n{exc.stderr or ''}\n--- server log ---\n"
                               f"{_log_tail(state_dir or SHARED_STATE)}") from exc


def ensure_mongo(state_dir: Path | None = None) -> str:
    """Start FerretDB (or reuse the running one); return its URI."""
    proc = mongo_sh("up", state_dir)
    for line in proc.stdout.splitlines():
        if line.startswith("KNARR_TEST_MONGO_URI=") and proc.returncode == 0:
            return line.removeprefix("KNARR_TEST_MONGO_URI=").strip()
    raise MongoUnavailable(f"`hack/services/mongo.sh up` failed (exit {proc.returncode}):\n{proc.stderr}\n"
                           f"--- last lines of the server log ---\n{_log_tail(state_dir or SHARED_STATE)}")


@pytest.fixture(scope="session")
def mongo_uri() -> str:
    """URI of the shared server, left running afterwards (stop it with `make services-down`)."""
    if os.environ.get("KNARR_TEST_MONGO_URI"):
        return os.environ["KNARR_TEST_MONGO_URI"]
    try:
        return ensure_mongo()
    except MongoUnavailable as exc:
        pytest.fail(f"local MongoDB-wire server (FerretDB) unavailable:\n{exc}", pytrace=False)


@pytest.fixture
def mongo_database(mongo_uri: str) -> Iterator[str]:
    """The name of a database of this test's own, dropped at its end."""
    name = f"t_{secrets.token_hex(6)}"
    yield name
    with MongoClient(mongo_uri, serverSelectionTimeoutMS=10_000) as client:
        client.drop_database(name)


def documents(uri: str, database: str, collection: str) -> list[dict[str, Any]]:
    """Every document of a collection, in insertion order (by _id for inserted ObjectIds)."""
    with MongoClient(uri, serverSelectionTimeoutMS=10_000) as client:
        return list(client[database][collection].find())


class PrivateMongo:
    """A FerretDB of the fault tests' own: killed, stopped and restarted on the same port and data."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.uri = ""

    def log_tail(self, lines: int = 60) -> str:
        return _log_tail(self.state_dir, lines)

    def start(self) -> str:
        uri = ensure_mongo(self.state_dir)
        if self.uri and uri != self.uri:
            raise MongoUnavailable(f"the private server came back on {uri}, not {self.uri} (its port was taken)")
        self.uri = uri
        return uri

    def stop(self) -> None:
        self.resume()
        mongo_sh("down", self.state_dir)

    @property
    def pid(self) -> int:
        return int((self.state_dir / "server.pid").read_text().strip())

    def kill(self) -> None:
        """SIGKILL: the server dies mid-write, as in a crash."""
        pid = self.pid
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
            time.sleep(0.02)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        try:
            os.kill(self.pid, signal.SIGCONT)
        except (OSError, ValueError):
            pass


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


@pytest.fixture(scope="session")
def private_mongo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMongo]:
    """A private server, started once per session and stopped at its end."""
    server = PrivateMongo(tmp_path_factory.mktemp("private-mongo"))
    try:
        server.start()
    except MongoUnavailable as exc:
        pytest.fail(f"private FerretDB unavailable:\n{exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
