"""``knarr init DIR``: a small pipeline that runs as written — handler, config, input, manifest, README.

The files come from ``knarr/cli/templates``. The tasks decode base64: spawned, they run the
``base64`` program, whose path (looked up on PATH when the files are written) is the only
machine-specific value; with ``--persistent`` they run in a persistent task program written
beside the handler (``tasks.py``), started by this Python, by its absolute path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from importlib import resources
from pathlib import Path
from string import Template

from knarr.errors import ExitCode, UsageError

FILES = ("handler.py", "knarr.yaml", "input.jsonl", "pipeline.yaml", "README.md")
PROGRAM_FILE = "tasks.py"  # --persistent: the task program
PROGRAM = "base64"


def files(persistent: bool) -> tuple[str, ...]:
    return (*FILES, PROGRAM_FILE) if persistent else FILES


def pipeline_name(directory: Path) -> str:
    """A DNS label (what Kubernetes names must be) from the directory's name."""
    name = re.sub(r"[^a-z0-9-]+", "-", directory.resolve().name.lower()).strip("-")[:40].strip("-")
    return name or "my-pipeline"


def _spawned(binary: str) -> dict[str, str]:
    return {"work": "with `base64 -d`, one subprocess per message", "program": "",
            "executor": f"  binary_path: {binary}\n", "manifest_executor": f"binaryPath: {binary}",
            "image_files": "handler.py"}


def _persistent(program: Path) -> dict[str, str]:
    command = json.dumps([sys.executable, str(program.resolve())])
    return {"work": "in a persistent task program, `tasks.py`",
            "program": "\n\nThe worker starts `tasks.py` once per pool slot and sends it task after task, so a "
                       "task costs no process start. Change `decode()` to your own work; knarr's "
                       "docs/task-protocol.md lets a program in any language take its place.",
            "executor": f"  persistent:\n    command: {command}  # this Python, which has knarr.task\n",
            "manifest_executor": "persistent: {command: [python, -m, tasks]}",
            "image_files": "handler.py and tasks.py"}


def render(directory: Path, binary: str | None, persistent: bool = False) -> dict[str, str]:
    """Every file's text (pure but for reading the templates and resolving paths)."""
    config = Path(os.path.relpath(directory / "knarr.yaml"))
    values = {"name": pipeline_name(directory),
              "config_path": str(config) if not str(config).startswith("..") else str((directory / "knarr.yaml").resolve()),
              **(_persistent(directory / PROGRAM_FILE) if persistent else _spawned(binary or PROGRAM))}
    templates = resources.files("knarr.cli") / "templates"
    return {name: Template((templates / f"{name}.tmpl").read_text()).safe_substitute(values)
            for name in files(persistent)}


def init_command(directory: str, force: bool = False, persistent: bool = False) -> int:
    target = Path(directory)
    binary = None
    if not persistent:
        binary = shutil.which(PROGRAM)
        if binary is None:
            raise UsageError(f"the sample pipeline runs `{PROGRAM}`, which is not on PATH; install coreutils, "
                             "or pass --persistent for tasks that run in a Python program instead")
    names = files(persistent)
    existing = [name for name in names if (target / name).exists()]
    if existing and not force:
        raise UsageError(f"{target} already has {', '.join(existing)}; pick a new directory or pass --force to overwrite")
    written = render(target, binary, persistent)
    target.mkdir(parents=True, exist_ok=True)
    for name, text in written.items():
        (target / name).write_text(text)
    config = target / "knarr.yaml"
    print(f"knarr init: wrote {', '.join(str(target / n) for n in names)}")
    print("next:")
    print(f"  knarr check --config {config}   # validate the config and the handler")
    print(f"  knarr run --config {config}     # run it on input.jsonl (one sample task fails on purpose)")
    return ExitCode.OK
