"""Test session wiring: real services are started (or reused) by session fixtures.

A test that needs a service and cannot get it fails with the service's log tail; nothing
is skipped for missing infrastructure.
"""

import pathlib
import sys

import uvloop

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # so `tests.*` imports work

pytest_plugins = [
    "tests.services.kafka", "tests.services.envtest", "tests.services.postgres", "tests.services.redis",
    "tests.services.mongo", "tests.services.http_server",
]


def pytest_asyncio_loop_factories(config, item):
    """Async tests run on uvloop, the loop `knarr run` gives a worker (tests/unit/test_local_runs.py covers asyncio's)."""
    return {"uvloop": uvloop.new_event_loop}
