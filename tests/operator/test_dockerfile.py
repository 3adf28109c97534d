"""The images' Dockerfiles are checked statically: hadolint when the toolchain has it, our rules always."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.services.envtest import hadolint_bin

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = [ROOT / "Dockerfile.operator", ROOT / "Dockerfile.worker"]

pytestmark = pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def _stages(dockerfile: Path) -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for op, arg in _instructions(dockerfile):
        if op == "FROM":
            stages.append([])
        stages[-1].append((op, arg))
    return stages


def test_the_build_is_multi_stage(dockerfile):
    assert len(_stages(dockerfile)) >= 2


def test_every_base_image_is_pinned_to_an_exact_tag_or_digest(dockerfile):
    stage_names = {arg.split()[-1] for op, arg in _instructions(dockerfile) if op == "FROM" and " AS " in arg.upper()}
    images = [arg.split()[0] for op, arg in _instructions(dockerfile) if op == "FROM" and arg.split()[0] not in stage_names]
    images += [m.group(1) for op, arg in _instructions(dockerfile) if op == "COPY" for m in [re.search(r"--from=(\S+)", arg)] if m and ":" in m.group(1)]
    for image in images:
        assert "@sha256:" in image or re.search(r":\d+\.\d+\.\d+", image), f"{image} is not pinned to an exact version or digest"
        assert not image.endswith(":latest")


def test_every_runnable_stage_runs_as_a_non_root_user(dockerfile):
    stages = _stages(dockerfile)
    runnable = [st for st in stages if any(op == "CMD" for op, _ in st)] + [stages[-1]]
    for stage in runnable:
        users = [arg for op, arg in stage if op == "USER"]
        assert users, f"stage {stage[0][1]!r} sets no USER"
        assert users[-1].split(":")[0] not in ("root", "0")


def test_nothing_is_downloaded_with_add(dockerfile):
    assert not [arg for op, arg in _instructions(dockerfile) if op == "ADD" and re.search(r"https?://", arg)]


def test_dependencies_come_from_the_lock_file(dockerfile):
    runs = [arg for op, arg in _instructions(dockerfile) if op == "RUN" and "uv sync" in arg]
    assert runs and all("--frozen" in r or "--locked" in r for r in runs)


def test_hadolint_finds_no_problem_when_available(dockerfile):
    binary = hadolint_bin()
    if binary is None:
        # build.sh reports whether hadolint could be had; the rule tests above always run.
        return
    proc = subprocess.run([binary, "--failure-threshold", "warning", str(dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
