"""The driver's progress bar counts chunks (Spark tasks) on a terminal, and draws nothing elsewhere."""

from __future__ import annotations

import io

import pytest

from knarr_spark.progress import Progress

pytestmark = pytest.mark.spark


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run_job(spark, group: str, chunks: int) -> None:
    sc = spark.sparkContext
    sc.setJobGroup(group, "progress test")
    sc.parallelize(range(chunks), chunks).map(lambda x: x * 2).collect()


def test_on_a_terminal_the_bar_ends_at_every_chunk_done(spark):
    out = Terminal()
    with Progress(spark.sparkContext, "knarr-progress-tty", 4, out=out):
        _run_job(spark, "knarr-progress-tty", 4)
    assert "chunks: 100%" in out.getvalue() and "4/4" in out.getvalue()


def test_without_a_terminal_there_is_no_bar(spark):
    out = io.StringIO()
    with Progress(spark.sparkContext, "knarr-progress-log", 4, out=out):
        _run_job(spark, "knarr-progress-log", 4)
    assert out.getvalue() == ""
