"""Fixtures of the backfill tests: one local Spark session, the Kafka broker, the demo workload.

Spark runs as ``local[2,2]``: two cores, and every task gets a second attempt, so a task
that crashes once is retried as on a cluster (plain ``local[N]`` never retries).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # tests/services is imported as a package from the repo root
    sys.path.insert(0, str(REPO_ROOT))

from tests.services.kafka import kafka_bootstrap  # noqa: E402,F401  (session fixture)

SPARK_MASTER = "local[2,2]"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The suite's one Spark session. Backfills run in-process reuse it (and leave it running)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(SPARK_MASTER).appName("knarr-backfill-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def grep() -> str:
    path = shutil.which("grep")
    assert path, "the demo handler runs grep; install it"
    return path


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from knarr.demo.data import write_corpus

    return write_corpus(tmp_path_factory.mktemp("corpus"), files=4, lines=200)
