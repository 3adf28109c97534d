"""The README stays true: its configuration reference, exit codes and example come from the code and run."""

import re
import subprocess
import sys
from pathlib import Path

from knarr.config.reference import END, EXIT_CODES_END, EXIT_CODES_START, START, render
from knarr.errors import exit_code_table

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
READMES = {path: path.read_text() for path in (ROOT / "README.md", ROOT / "operator" / "README.md", ROOT / "spark" / "README.md")}


def test_the_readme_configuration_reference_matches_the_models():
    embedded = README.split(START, 1)[1].split(END, 1)[0].strip()
    assert embedded == render().strip(), "regenerate: make docs"


def test_the_readme_exit_code_table_is_the_one_in_knarr_errors():
    embedded = README.split(EXIT_CODES_START, 1)[1].split(EXIT_CODES_END, 1)[0].strip()
    assert embedded == exit_code_table().strip(), "regenerate: make docs"


def test_the_readme_example_is_the_quickstart_handler_file():
    block = re.search(r"<!-- example:quickstart -->\n```python\n(.*?)```\n<!-- example:end -->", README, re.S)
    assert block is not None
    assert block.group(1) == (ROOT / "examples/quickstart/handler.py").read_text()


def test_no_readme_tells_people_to_run_a_bare_uv_which_a_new_shell_does_not_have():
    for path, text in READMES.items():
        commands = re.findall(r"(?:^|`)(uv (?:run|sync|pip)[^`\n]*)", text, re.M)
        assert commands == [], f"{path}: use make targets or the activated .venv instead: {commands}"


def test_bad_arguments_exit_2_with_a_message_naming_the_problem(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", str(tmp_path / "missing.yaml"),
                           "--handler", "x:Y"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "missing.yaml' does not exist" in proc.stderr
