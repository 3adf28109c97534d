"""The README's first screen works as written: on a clean clone, in a new shell, in any order.

"A new shell" here is a PATH without uv and without any venv: exactly what someone has after
cloning, and after `make setup` put uv into ~/.local/bin without touching their PATH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def quickstart_commands(readme: str) -> str:
    block = re.search(r"<!-- quickstart:start -->\n```sh\n(.*?)```\n<!-- quickstart:end -->", readme, re.S)
    assert block is not None, "the README has no quick-start block"
    return block.group(1)


def new_shell_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV")}
    unwanted = {str(Path.home() / ".local" / "bin"), str(Path(sys.executable).parent)}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p not in unwanted and "/.venv/" not in p)
    assert shutil.which("uv", path=env["PATH"]) is None, "uv is on the PATH the test wants without it"
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A clone of this repository with the working tree's changes (tracked and new files) on top."""
    target = tmp_path_factory.mktemp("clone") / "knarr"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(target)], check=True)
    diff = subprocess.run(["git", "diff", "HEAD", "--binary"], cwd=REPO_ROOT, check=True, capture_output=True).stdout
    if diff:
        subprocess.run(["git", "apply", "--whitespace=nowarn"], cwd=target, input=diff, check=True)
    untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "-z"], cwd=REPO_ROOT,
                               check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, untracked):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target / name)
    return target


def bash(script: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f"set -euo pipefail\n{script}"], cwd=cwd, env=new_shell_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_make_kafka_up_works_in_a_fresh_clone_before_make_setup(clone):
    assert not (clone / ".venv").exists()
    proc = bash("make kafka-up", clone)
    try:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        assert re.search(r"^KAFKA_BOOTSTRAP=127\.0\.0\.1:\d+$", proc.stdout, re.M), proc.stdout
    finally:
        bash("make kafka-down", clone, timeout=120)


def test_the_readme_quick_start_runs_on_a_clean_clone_in_a_new_shell(clone):
    commands = quickstart_commands((clone / "README.md").read_text())
    proc = bash(commands, clone)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    counts = [json.loads(line) for line in (clone / "examples/quickstart/out/word-counts.jsonl").read_text().splitlines()]
    assert {r["id"]: r["words"] for r in counts} == {"a": 7, "b": 7, "c": 9, "d": 9}
    assert (clone / "my-pipeline" / "out" / "decoded.jsonl").is_file()
    assert "exit code 4" in proc.stdout  # the run with the failing task, as the README says
    failures = [line for line in proc.stderr.splitlines() if "task failed" in line]
    assert len(failures) == 1 and "source_offsets=[2]" in failures[0] and "invalid input" in failures[0]


def test_make_crds_and_make_docs_work_in_a_new_shell_and_change_nothing(clone):
    proc = bash("make crds docs", clone)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = subprocess.run(["git", "status", "--porcelain", "--", "crds", "charts", "README.md"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout
    assert status == "" or _only_the_overlay(clone, status), status


def _only_the_overlay(clone: Path, status: str) -> bool:
    """Files the overlay of uncommitted work changed show as modified; they must equal this tree's."""
    for line in status.splitlines():
        name = line[3:]
        if (clone / name).read_bytes() != (REPO_ROOT / name).read_bytes():
            return False
    return True
