"""``knarr init DIR``: a small pipeline that runs as written — handler, config, input, manifest, README.

The files come from ``knarr/cli/templates``; the only machine-specific value is the path of
the program the tasks run (``base64``), looked up on PATH when the files are written.
"""

from __future__ import annotations

import os
import re
import shutil
from importlib import resources
from pathlib import Path
from string import Template

from knarr.errors import ExitCode, UsageError

FILES = ("handler.py", "knarr.yaml", "input.jsonl", "pipeline.yaml", "README.md")
PROGRAM = "base64"


def pipeline_name(directory: Path) -> str:
    """A DNS label (what Kubernetes names must be) from the directory's name."""
    name = re.sub(r"[^a-z0-9-]+", "-", directory.resolve().name.lower()).strip("-")[:40].strip("-")
    return name or "my-pipeline"


def render(directory: Path, binary: str) -> dict[str, str]:
    """Every file's text (pure but for reading the templates)."""
    config = Path(os.path.relpath(directory / "knarr.yaml"))
    values = {"name": pipeline_name(directory), "binary": binary,
              "config_path": str(config) if not str(config).startswith("..") else str((directory / "knarr.yaml").resolve())}
    templates = resources.files("knarr.cli") / "templates"
    return {name: Template((templates / f"{name}.tmpl").read_text()).safe_substitute(values) for name in FILES}


def init_command(directory: str, force: bool = False) -> int:
    target = Path(directory)
    binary = shutil.which(PROGRAM)
    if binary is None:
        raise UsageError(f"the sample pipeline runs `{PROGRAM}`, which is not on PATH; install coreutils")
    existing = [name for name in FILES if (target / name).exists()]
    if existing and not force:
        raise UsageError(f"{target} already has {', '.join(existing)}; pick a new directory or pass --force to overwrite")
    files = render(target, binary)
    target.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (target / name).write_text(text)
    config = target / "knarr.yaml"
    print(f"knarr init: wrote {', '.join(str(target / n) for n in FILES)}")
    print("next:")
    print(f"  knarr check --config {config}   # validate the config and the handler")
    print(f"  knarr run --config {config}     # run it on input.jsonl (one sample task fails on purpose)")
    return ExitCode.OK
