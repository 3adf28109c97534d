"""The examples people copy run as shown, and every Pipeline manifest shown is one the worker accepts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from knarr.sinks import build_sinks
from knarr_operator.spec import split_spec
from knarr_operator.worker_config import render_worker_config
from tests.examples import EXAMPLES, OTHER_MANIFESTS, kubernetes_manifests, pipeline_manifests, worker_configs

MANIFESTS = pipeline_manifests()


def test_every_yaml_file_in_examples_is_a_worker_config_a_pipeline_or_a_known_other_manifest():
    pipelines = {name.split("#")[0] for name in MANIFESTS}
    for path in kubernetes_manifests():
        assert str(path.relative_to(EXAMPLES.parent)) in pipelines or path.name in OTHER_MANIFESTS, path


@pytest.mark.parametrize("config", worker_configs(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_config_runs_through_the_local_source(config: Path, tmp_path):
    copy = tmp_path / config.parent.name
    shutil.copytree(config.parent, copy, ignore=shutil.ignore_patterns("out"))
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", str(copy / config.name)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert " 0 failed," in proc.stderr and "dead-lettered         0" in proc.stderr


def test_the_quickstart_counts_the_words_of_each_message(tmp_path):
    copy = tmp_path / "quickstart"
    shutil.copytree(EXAMPLES / "quickstart", copy, ignore=shutil.ignore_patterns("out"))
    subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", str(copy / "knarr.yaml")], check=True,
                   capture_output=True, timeout=120)
    rows = {r["id"]: r["words"] for r in map(json.loads, (copy / "out" / "word-counts.jsonl").read_text().splitlines())}
    assert rows == {"a": 7, "b": 7, "c": 9, "d": 9}


@pytest.mark.parametrize("where", sorted(MANIFESTS))
def test_every_pipeline_manifest_shown_passes_the_workers_own_validation(where):
    _, worker_part = split_spec(MANIFESTS[where]["spec"])
    config = render_worker_config(worker_part).validated
    build_sinks(config)  # every sink type it names exists in this version


def test_the_manifests_shown_include_the_examples_the_readmes_and_knarr_init():
    sources = {name.split("#")[0] for name in MANIFESTS}
    assert {"examples/pipeline.yaml", "operator/README.md", "knarr init's pipeline.yaml"} <= sources
