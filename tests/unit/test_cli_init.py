"""`knarr init DIR` writes a small pipeline that runs as written, and shows a failing task on purpose;
`--persistent` writes the same pipeline with its tasks run in a persistent task program (tasks.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from knarr.cli.scaffold import FILES, files, pipeline_name
from knarr.errors import ExitCode


def knarr(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "knarr.cli", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=env)


@pytest.fixture(params=["spawned", "persistent"])
def scaffold(request, tmp_path: Path) -> Path:
    flags = ["--persistent"] if request.param == "persistent" else []
    proc = knarr("init", "my-pipeline", *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "my-pipeline"


def persistent(scaffold: Path) -> bool:
    return (scaffold / "tasks.py").exists()


def test_init_writes_a_handler_its_config_input_a_pipeline_manifest_and_a_readme(scaffold):
    assert sorted(p.name for p in scaffold.iterdir()) == sorted(files(persistent(scaffold)))
    assert "knarr run --config my-pipeline/knarr.yaml" in (scaffold / "README.md").read_text()


def test_the_persistent_pipeline_runs_its_tasks_in_tasks_py_started_by_this_python(scaffold):
    config = yaml.safe_load((scaffold / "knarr.yaml").read_text())["executor"]
    if persistent(scaffold):
        assert config["persistent"]["command"] == [sys.executable, str((scaffold / "tasks.py").resolve())]
        assert "binary_path" not in config
        assert "tasks.py" in (scaffold / "README.md").read_text() and "tasks.py" in (scaffold / "handler.py").read_text()
    else:
        assert Path(config["binary_path"]).name == "base64" and "persistent" not in config
        assert sorted(FILES) == sorted(p.name for p in scaffold.iterdir())


def test_init_without_base64_on_path_says_so_and_offers_the_persistent_pipeline(tmp_path):
    bare = {**os.environ, "PATH": str(tmp_path / "nothing-here")}
    proc = knarr("init", "p", cwd=tmp_path, env=bare)
    assert proc.returncode == ExitCode.USAGE
    assert "`base64`, which is not on PATH" in proc.stderr and "--persistent" in proc.stderr
    assert knarr("init", "p", "--persistent", cwd=tmp_path, env=bare).returncode == 0


def test_init_tells_what_to_run_next(tmp_path):
    proc = knarr("init", "p", cwd=tmp_path)
    assert "knarr check --config p/knarr.yaml" in proc.stdout
    assert "knarr run --config p/knarr.yaml" in proc.stdout


def test_init_refuses_to_overwrite_an_existing_pipeline_unless_forced(scaffold):
    (scaffold / "handler.py").write_text("# my own work\n")
    proc = knarr("init", "my-pipeline", cwd=scaffold.parent)
    assert proc.returncode == ExitCode.USAGE
    assert "already has handler.py" in proc.stderr and "--force" in proc.stderr
    assert (scaffold / "handler.py").read_text() == "# my own work\n"
    assert knarr("init", "my-pipeline", "--force", cwd=scaffold.parent).returncode == 0
    assert "class Handler" in (scaffold / "handler.py").read_text()


def test_what_init_writes_passes_knarr_check(scaffold):
    proc = knarr("check", "--config", "knarr.yaml", cwd=scaffold)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stdout


def test_what_init_writes_runs_decoding_two_messages_and_failing_one_visibly(scaffold, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = knarr("run", "--config", str(scaffold / "knarr.yaml"), cwd=elsewhere)

    assert proc.returncode == ExitCode.WORK_FAILED, proc.stderr
    rows = [json.loads(line) for line in (scaffold / "out" / "decoded.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["text"]) for r in rows) == [("greeting", "hello, knarr!"), ("motto", "one message, one subprocess")]
    [failure] = [line for line in proc.stderr.splitlines() if "task failed" in line]
    assert "[warning" in failure
    for field in ("source_offsets=[2]", "exit_code=1", "partition=0", "action=skipped", "invalid input", "task_id="):
        assert field in failure, failure
    assert "tasks                 3   2 succeeded, 1 failed, 0 replaced" in proc.stderr


def test_a_second_run_resumes_after_the_committed_offsets_and_says_so(scaffold):
    knarr("run", "--config", "knarr.yaml", cwd=scaffold)
    proc = knarr("run", "--config", "knarr.yaml", cwd=scaffold)
    assert proc.returncode == 0, proc.stderr
    assert "nothing left to do: every line is committed in out/offsets.json" in proc.stderr


def test_the_manifest_init_writes_is_a_valid_pipeline_for_the_operator_and_the_worker(scaffold):
    from knarr_operator.spec import split_spec
    from knarr_operator.worker_config import render_worker_config

    manifest = yaml.safe_load((scaffold / "pipeline.yaml").read_text())
    assert manifest["metadata"]["name"] == "my-pipeline"
    operator_part, worker_part = split_spec(manifest["spec"])
    assert operator_part.handler == "handler:Handler"
    worker = render_worker_config(worker_part).validated
    assert worker.sinks.filesystem["results"].base_path == "/data/results"
    if persistent(scaffold):  # the image's python has knarr, and /app (handler.py, tasks.py) is its PYTHONPATH
        assert worker.executor.persistent.command == ["python", "-m", "tasks"] and worker.executor.binary_path is None
    else:
        assert Path(worker.executor.binary_path).name == "base64"


@pytest.mark.parametrize(("folder", "name"), [("My_Pipeline", "my-pipeline"), ("--x--", "x"), ("___", "my-pipeline")])
def test_the_pipeline_name_is_a_valid_kubernetes_name(tmp_path, folder, name):
    assert pipeline_name(tmp_path / folder) == name
