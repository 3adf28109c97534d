"""What importing knarr costs: a task program's `import knarr.task` loads no framework, and the
package's public names still all resolve (loaded on first use)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import knarr

PACKAGE_INIT = Path(knarr.__file__)
# What a task program must not pay for at every start: the worker's dependencies and the framework.
HEAVY = ["pydantic", "confluent_kafka", "structlog", "prometheus_client", "yaml",
         "knarr.config", "knarr.api", "knarr.cache", "knarr.engine.worker"]


def modules_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``statement``."""
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(proc.stdout))


@pytest.mark.parametrize("statement", ["import knarr.task", "from knarr.task import serve", "import knarr.engine.frames"])
def test_the_task_sdk_imports_without_the_framework(statement):
    loaded = modules_after(statement)
    assert "knarr.task" in loaded or "knarr.engine.frames" in loaded
    assert [name for name in HEAVY if name in loaded] == []


def test_importing_knarr_itself_loads_none_of_its_names_until_used():
    loaded = modules_after("import knarr")
    assert [name for name in HEAVY if name in loaded] == []
    assert {"knarr.api.handler", "knarr.config"} <= modules_after("import knarr; knarr.BaseHandler; knarr.load_config")


def test_the_worker_loads_clients_of_optional_services_only_when_configured():
    """Redis's client (the shared cache tier) and the debug server's aiohttp cost start-up time and memory."""
    loaded = modules_after("import knarr.engine.worker")
    assert [name for name in ("redis", "aiohttp", "knarr.cache.shared", "knarr.debug.server") if name in loaded] == []


@pytest.mark.parametrize("name", knarr.__all__)
def test_every_public_name_resolves_to_the_object_of_its_module(name):
    value = getattr(knarr, name)
    source = importlib.import_module(knarr._SOURCES[name])
    assert value is getattr(source, name)


def test_star_import_and_dir_offer_every_public_name():
    namespace: dict[str, object] = {}
    exec("from knarr import *", namespace)
    assert set(knarr.__all__) <= set(namespace)
    assert set(knarr.__all__) <= set(dir(knarr))
    assert "__version__" in dir(knarr)


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'knarr' has no attribute 'BaseHandlr'"):
        knarr.BaseHandlr  # noqa: B018


def test_the_public_names_the_lazy_table_and_the_type_checking_imports_agree():
    tree = ast.parse(PACKAGE_INIT.read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    for_type_checkers = {alias.name: node.module for node in guarded.body if isinstance(node, ast.ImportFrom)
                         for alias in node.names}
    assert for_type_checkers == knarr._SOURCES
    assert sorted(knarr.__all__) == sorted(knarr._SOURCES)
