"""The worker's parts import downwards only: each folder (or top-level module) of the ``knarr``
package uses the parts below it and none above, so the layout reads as the architecture does and a
change to a lower part never needs a higher one. Read from every ``import`` in the source, those
inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import knarr

PACKAGE = Path(knarr.__file__).parent

# Lowest first. A part may import the parts of lower layers, and its own modules; not its own
# layer's other parts, nor anything above.
LAYERS: list[set[str]] = [
    {"errors"},
    {"api"},  # the handler's contract: models, the cache's face
    {"config"},
    {"observability", "loader", "migrate"},
    {"runtime", "kafka"},  # what the engine and its adapters share; Kafka's client settings
    {"cache", "sources", "sinks"},  # the adapters
    {"engine", "dlq"},
    {"debug", "demo", "task", "drakkar", "supervisor"},
    {"cli"},
]
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}

# Imports that go up, each made where it is needed (at call time) and why.
UPWARDS = {
    # Loading a config checks its plug-in sinks where the worker runs (they must be installed there).
    ("knarr.config.loading", "knarr.sinks.plugins"),
    # The worker starts the flight recorder and the debug UI when debug.enabled, and only then.
    ("knarr.engine.worker", "knarr.debug.service"),
}


def part_of(module: str) -> str:
    """``knarr.engine.ledger`` -> ``engine``; ``knarr.errors`` -> ``errors``."""
    return module.split(".")[1]


def imports() -> list[tuple[str, str]]:
    """(importing module, imported knarr module) for every import of a knarr module in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(("knarr", *path.relative_to(PACKAGE).with_suffix("").parts))
        if module == "knarr.__init__":
            continue  # the package's face: it hands every public name on, from every part
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [(module, name) for name in names if name.startswith("knarr.")]
    return found


def test_every_part_of_the_package_has_a_layer():
    parts = {path.stem if path.is_file() else path.name for path in PACKAGE.iterdir()
             if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()}
    assert not parts - RANK.keys(), f"new parts of knarr, give each its layer in LAYERS: {parts - RANK.keys()}"
    assert not RANK.keys() - parts, f"parts in LAYERS that knarr no longer has: {RANK.keys() - parts}"


def test_each_part_imports_only_the_parts_below_it():
    upwards = sorted((module, name) for module, name in imports()
                     if part_of(module) != part_of(name) and RANK[part_of(name)] >= RANK[part_of(module)]
                     and (module, name) not in UPWARDS)
    assert not upwards, ("imports that go up or sideways, (importer, imported): move what both need below "
                         f"them, or pass it in: {upwards}")


def test_every_import_allowed_to_go_up_still_does():
    gone = UPWARDS - set(imports())
    assert not gone, f"allowed upward imports that are gone, drop them from UPWARDS: {gone}"
