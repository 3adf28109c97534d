"""The README stays true: its configuration reference and example come from the code and run."""

import json
import re
import subprocess
import sys
from pathlib import Path

from knarr.config.reference import END, START, render

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_readme_configuration_reference_matches_the_models():
    embedded = README.split(START, 1)[1].split(END, 1)[0].strip()
    assert embedded == render().strip(), "regenerate: uv run python -m knarr.config.reference --write README.md"


def test_the_readme_example_is_the_quickstart_handler_file():
    block = re.search(r"<!-- example:quickstart -->\n```python\n(.*?)```\n<!-- example:end -->", README, re.S)
    assert block is not None
    assert block.group(1) == (ROOT / "examples/quickstart/handler.py").read_text()


def test_the_quickstart_runs_as_documented(tmp_path):
    config = (ROOT / "examples/quickstart/knarr.yaml").read_text().replace("out/quickstart", str(tmp_path))
    config = config.replace("examples/quickstart/input.jsonl", str(ROOT / "examples/quickstart/input.jsonl"))
    (tmp_path / "knarr.yaml").write_text(config)
    proc = subprocess.run(
        [sys.executable, "-m", "knarr.cli", "run", "--config", str(tmp_path / "knarr.yaml"),
         "--handler", f"{ROOT}/examples/quickstart/handler.py:WordCounter"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["id"]: r["words"] for r in map(json.loads, (tmp_path / "word-counts.jsonl").read_text().splitlines())}
    assert rows == {"a": 7, "b": 7, "c": 9, "d": 9}


def test_bad_arguments_exit_2_with_a_message_naming_the_problem(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", str(tmp_path / "missing.yaml"),
                           "--handler", "x:Y"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "missing.yaml' does not exist" in proc.stderr
