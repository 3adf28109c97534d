"""One real worker on the real broker, recorder and debug UI on, serving every test of this folder.

Its handler fans each job out into one task per range; a range too wide for the tool fails with
"out of memory" and is replaced by its two halves (a replacement chain), a range past 100 fails for
good. Every task prints the job's note first: the note is untrusted text (it holds HTML), so the
pages must show it as text. A message that is no job goes to the dead-letter queue.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import async_playwright, expect
from pydantic import BaseModel

import knarr
from knarr.config.root import KnarrConfig
from knarr.engine.worker import Worker
from tests.debug_ui.browser import chromium_executable, launch
from tests.services.kafka import committed_offsets, create_topic, produce_json
from tests.worker.harness import kafka_config, running, topics, wait_until

# Assertions on the page wait up to this long (Playwright's default is 5 s): the machine running
# the tests may be busy, and the overview refreshes every 2 s.
expect.set_options(timeout=30_000)

NOTE = '<img src=x onerror="window.__pwned=1"><b>note</b>'
TOOL = (
    "#!/bin/sh\n"
    "# $1 $2: the range [lo, hi); $3: the job's note ('sleep N' makes the task take N seconds)\n"
    'printf "%s\\n" "$3"\n'
    'case "$3" in "sleep "*) sleep "${3#sleep }" ;; esac\n'
    'if [ "$2" -ge 100 ]; then echo "bad input $1-$2" >&2; exit 2; fi\n'
    'if [ $(($2 - $1)) -gt 2 ]; then echo "out of memory for $1-$2" >&2; exit 137; fi\n'
    'seq "$1" $(($2 - 1))\n'
)


class Job(BaseModel):
    job_id: str
    ranges: list[tuple[int, int]]
    note: str = ""


class RangeHandler(knarr.BaseHandler[Job, None]):
    """One task per range; a task out of memory is split in halves; one summary per job to the out topic."""

    def __init__(self) -> None:
        self.groups: dict[int, knarr.MessageGroup] = {}

    async def arrange(self, messages, pending):
        return [
            knarr.ExecutorTask(task_id=knarr.make_task_id("range"), args=[str(lo), str(hi), m.payload.note],
                               source_offsets=[m.offset])
            for m in messages if m.payload is not None for lo, hi in m.payload.ranges
        ]

    async def on_error(self, task, error):
        if "memory" in error.stderr:
            lo, hi = int(task.args[0]), int(task.args[1])
            mid = lo + (hi - lo) // 2
            return [knarr.ExecutorTask(task_id=knarr.make_task_id("half"), args=[str(a), str(b), task.args[2]],
                                       source_offsets=task.source_offsets) for a, b in ((lo, mid), (mid, hi))]
        return knarr.ErrorAction.SKIP

    async def on_message_complete(self, group):
        self.groups[group.source_message.offset] = group
        numbers = sorted(int(line) for r in group.results for line in r.stdout.split("\n")[1:] if line)
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={
            "job_id": group.source_message.payload.job_id, "numbers": numbers,
            "tasks": group.total, "replaced": group.replaced})])


@dataclass
class DebugWorker:
    """The running worker and what the tests need to reach and check it."""

    worker: Worker
    handler: RangeHandler
    config: KnarrConfig
    bootstrap: str
    source: str
    out: str
    token: str
    url: str  # the debug UI's base URL, without the token
    offsets: dict[str, int] = field(default_factory=dict)  # job id -> offset

    def page_url(self, route: str = "overview", token: str | None = "") -> str:
        """The UI at #/<route>, with ?token= (token=None: without any)."""
        given = self.token if token == "" else token
        return f"{self.url}/{'?token=' + given if given is not None else ''}#/{route}"

    def committed(self) -> dict[int, int]:
        return committed_offsets(self.bootstrap, self.config.kafka.consumer_group, self.source)


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_executable()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(chromium):
    async with async_playwright() as pw:
        browser = await launch(pw, chromium)
        yield browser
        await browser.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser):
    context = await browser.new_context(viewport={"width": 1360, "height": 900}, device_scale_factor=1)
    page = await context.new_page()
    page.set_default_timeout(30_000)
    yield page
    await context.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def debug_worker(kafka_bootstrap, tmp_path_factory) -> DebugWorker:
    tmp: Path = tmp_path_factory.mktemp("debug-ui")
    tool = tmp / "ranges"
    tool.write_text(TOOL)
    tool.chmod(0o755)
    src, out = topics(kafka_bootstrap)
    create_topic(kafka_bootstrap, f"{src}_dlq", 1)
    token = "t0k-" + secrets.token_hex(12)
    cfg = kafka_config(
        kafka_bootstrap, src, out_topic=out,
        executor={"binary_path": str(tool), "max_executors": 2},
        source={"on_parse_error": "dlq"},
        debug={
            "enabled": True, "host": "127.0.0.1", "port": 0, "token": token, "db_dir": str(tmp / "recorder"),
            "flush_interval_seconds": 0.2, "state_sync_interval_seconds": 1, "ws_min_duration_ms": 0,
            "output_min_duration_ms": 0, "prometheus_url": "http://prometheus.invalid:9090",
            "custom_links": [{"title": "Runbook", "url": "https://runbooks.invalid/knarr"},
                             {"title": "Not a link", "url": "javascript:window.__pwned=2"}],
        },
    )
    (tmp / "recorder").mkdir()
    handler = RangeHandler()
    jobs = [
        {"job_id": "split", "ranges": [[0, 5], [100, 101]], "note": NOTE},
        {"job_id": "plain", "ranges": [[10, 12]], "note": "plain"},
        "this is no job",  # fails to parse: dead-lettered
    ]
    produced = produce_json(kafka_bootstrap, src, jobs, partition=0)
    async with running(Worker(cfg, handler)) as worker:
        dw = DebugWorker(worker=worker, handler=handler, config=cfg, bootstrap=kafka_bootstrap, source=src, out=out,
                         token=token, url=f"http://127.0.0.1:{worker.debug_server.port}",
                         offsets={"split": produced[0][1], "plain": produced[1][1], "bad": produced[2][1]})
        await wait_until(lambda: dw.committed() == {0: produced[-1][1] + 1}, 60, "the three messages committed")
        yield dw
