"""`knarr probe` refuses what it cannot use in one line naming it, never with a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from knarr.errors import ExitCode

HANDLERS = '''
import knarr

class Fine(knarr.BaseHandler):
    async def arrange(self, messages, pending):
        return []

class BrokenInit(Fine):
    def __init__(self):
        raise RuntimeError("no model file")

class BrokenReady(Fine):
    async def on_ready(self, config):
        raise ConnectionError("cache unreachable")
'''


def probe(tmp_path: Path, handler: str, *args: str, stdin: str = '{"value": "x"}') -> subprocess.CompletedProcess[str]:
    (tmp_path / "handlers.py").write_text(HANDLERS)
    (tmp_path / "knarr.yaml").write_text(json.dumps({"sinks": {"filesystem": {"out": {"base_path": str(tmp_path)}}}}))
    return subprocess.run([sys.executable, "-m", "knarr.cli", "probe", "--config", str(tmp_path / "knarr.yaml"),
                           "--handler", f"{tmp_path / 'handlers.py'}:{handler}", *args],
                          input=stdin, capture_output=True, text=True, timeout=120)


def test_a_message_without_tasks_goes_through_and_exits_0(tmp_path):
    proc = probe(tmp_path, "Fine", "--json", "-")
    assert proc.returncode == ExitCode.OK, proc.stderr
    report = json.loads(proc.stdout)
    assert report["group"] == {"total": 0, "succeeded": 0, "failed": 0, "replaced": 0, "closed": True}
    assert report["message"]["value"] == "x" and report["errors"] == []


@pytest.mark.parametrize(("handler", "says"), [
    ("BrokenInit", "BrokenInit() raised RuntimeError: no model file"),
    ("BrokenReady", "the handler's on_ready raised ConnectionError: cache unreachable"),
])
def test_a_handler_that_raises_before_the_message_exits_2_saying_where(tmp_path, handler, says):
    proc = probe(tmp_path, handler, "-")
    assert proc.returncode == ExitCode.USAGE
    assert says in proc.stderr and "Traceback" not in proc.stderr


def test_a_missing_message_file_exits_2_naming_it(tmp_path):
    proc = probe(tmp_path, "Fine", str(tmp_path / "nope.json"))
    assert proc.returncode == ExitCode.USAGE
    assert f"cannot read the message file '{tmp_path / 'nope.json'}': No such file or directory" in proc.stderr


@pytest.mark.parametrize("timeout", ["0", "soon"])
def test_a_timeout_out_of_range_is_refused_by_the_arguments(tmp_path, timeout):
    proc = probe(tmp_path, "Fine", "--timeout", timeout, "-")
    assert proc.returncode == ExitCode.USAGE and "--timeout" in proc.stderr


def test_a_handler_using_the_cache_is_probed_with_a_cache_of_its_own_in_memory(tmp_path):
    (tmp_path / "cached.py").write_text(
        "import knarr\n"
        "class Cached(knarr.BaseHandler):\n"
        "    async def arrange(self, messages, pending):\n"
        "        self.cache.set('seen', messages[0].value.decode())\n"
        "        return [knarr.ExecutorTask(source_offsets=[messages[0].offset], precomputed=await self.cache.precomputed('seen'))]\n")
    cache_dir = tmp_path / "worker-cache"
    (tmp_path / "knarr.yaml").write_text(json.dumps({"sinks": {"filesystem": {"out": {"base_path": str(tmp_path)}}},
                                                     "cache": {"enabled": True, "db_dir": str(cache_dir)}}))
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "probe", "--config", str(tmp_path / "knarr.yaml"),
                           "--handler", f"{tmp_path / 'cached.py'}:Cached", "--json", "-"],
                          input='{"value": "x"}', capture_output=True, text=True, timeout=120)
    assert proc.returncode == ExitCode.OK, proc.stderr
    assert json.loads(proc.stdout)["group"]["succeeded"] == 1
    assert not cache_dir.exists(), "the probe must not write the worker's cache file"
