"""Paths in a config file are relative to the file, so a config works from any working directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from knarr.config import config_from_dict, load_config

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART_HANDLER = ROOT / "examples" / "quickstart" / "handler.py"

CONFIG = """\
handler: handlers/words.py:WordCounter
source: {type: local, local: {path: data/input.jsonl, offsets_path: state/offsets.json}}
executor: {binary_path: /usr/bin/wc}
sinks: {filesystem: {results: {base_path: out}, archive: {base_path: /var/tmp/knarr-archive}}}
dlq: {path: ../dead/dlq.jsonl}
metrics: {enabled: false}
"""


def project(tmp_path: Path) -> Path:
    """A pipeline folder: config, handler and input in their own subfolders."""
    folder = tmp_path / "pipeline"
    (folder / "handlers").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "handlers" / "words.py").write_text(QUICKSTART_HANDLER.read_text())
    lines = [{"id": "x", "text": "three little words"}, {"id": "y", "text": "two words"}]
    (folder / "data" / "input.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (folder / "knarr.yaml").write_text(CONFIG)
    return folder


def test_relative_paths_resolve_against_the_config_files_directory(tmp_path):
    folder = project(tmp_path)
    config = load_config(folder / "knarr.yaml", env={})
    assert config.handler == f"{folder}/handlers/words.py:WordCounter"
    assert config.source.local.path == str(folder / "data" / "input.jsonl")
    assert config.source.local.offsets_path == str(folder / "state" / "offsets.json")
    assert config.sinks.filesystem["results"].base_path == str(folder / "out")
    assert config.dlq.path == str(tmp_path / "dead" / "dlq.jsonl")


def test_absolute_paths_stay_as_they_are(tmp_path):
    config = load_config(project(tmp_path) / "knarr.yaml", env={})
    assert config.sinks.filesystem["archive"].base_path == "/var/tmp/knarr-archive"
    assert config.executor.binary_path == "/usr/bin/wc"


def test_a_module_handler_is_not_taken_for_a_path(tmp_path):
    folder = project(tmp_path)
    (folder / "knarr.yaml").write_text(CONFIG.replace("handlers/words.py:WordCounter", "knarr.demo.handler:SearchHandler"))
    assert load_config(folder / "knarr.yaml", env={}).handler == "knarr.demo.handler:SearchHandler"


def test_a_path_from_an_env_override_is_taken_as_given(tmp_path):
    config = load_config(project(tmp_path) / "knarr.yaml", env={"KNARR_DLQ__PATH": "here/dlq.jsonl"})
    assert config.dlq.path == "here/dlq.jsonl"


def test_plain_data_configs_keep_their_paths(tmp_path):
    config = config_from_dict({"sinks": {"filesystem": {"out": {"base_path": "relative/out"}}}})
    assert config.sinks.filesystem["out"].base_path == "relative/out"


def test_a_pipeline_runs_the_same_from_another_working_directory(tmp_path):
    folder = project(tmp_path)
    (folder / "knarr.yaml").write_text(CONFIG.replace(", archive: {base_path: /var/tmp/knarr-archive}", ""))
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", "../../pipeline/knarr.yaml"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (folder / "out" / "word-counts.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["words"]) for r in rows) == [("x", 3), ("y", 2)]
    assert (folder / "state" / "offsets.json").is_file()
    assert list(elsewhere.iterdir()) == []  # nothing was written where it ran
