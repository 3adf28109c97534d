"""What the repository shows people: example configs and Pipeline manifests, wherever they are.

Collected from files and from the READMEs' ```yaml blocks, so a test can run or validate each
one and a new example cannot slip past them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from knarr.cli.scaffold import render

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"
READMES = [REPO_ROOT / "README.md", REPO_ROOT / "operator" / "README.md", REPO_ROOT / "spark" / "README.md"]

# Kubernetes objects in examples/ that are not Pipelines (they are applied as they are by `make kind-up`).
OTHER_MANIFESTS = {"kafka.yaml"}


def worker_configs() -> list[Path]:
    """Every worker config file under examples/ (a YAML mapping without apiVersion)."""
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        docs = list(yaml.safe_load_all(path.read_text()))
        if docs and isinstance(docs[0], dict) and "apiVersion" not in docs[0]:
            found.append(path)
    return found


def pipeline_manifests() -> dict[str, dict[str, Any]]:
    """Every Pipeline manifest shown anywhere, by where it is shown (file, or README#block)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and doc.get("kind") == "Pipeline":
                found[f"{path.relative_to(REPO_ROOT)}#{i}"] = doc
    for readme in READMES:
        blocks = re.findall(r"```yaml\n(.*?)```", readme.read_text(), re.S)
        for i, block in enumerate(blocks):
            for doc in yaml.safe_load_all(block):
                if isinstance(doc, dict) and doc.get("kind") == "Pipeline":
                    found[f"{readme.relative_to(REPO_ROOT)}#yaml-{i}"] = doc
    for flag, persistent in (("", False), (" --persistent", True)):
        written = render(Path("my-pipeline"), "/usr/bin/base64", persistent=persistent)
        found[f"knarr init{flag}'s pipeline.yaml"] = yaml.safe_load(written["pipeline.yaml"])
    return found


def kubernetes_manifests() -> list[Path]:
    return [p for p in sorted(EXAMPLES.rglob("*.yaml")) if p not in worker_configs()]
