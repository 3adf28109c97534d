"""The debug UI in real headless Chromium, against a real worker on the real broker.

The worker (conftest.py) ran three messages before these tests: a job whose first range is split
twice on "out of memory" and whose second range fails for good, a plain job, and a message that
is no job (dead-lettered). Each test opens the page as an operator would, with ?token=, and
checks what the page shows against what the worker and its handler saw. Screenshots land in
out/screenshots/ (`make screenshots` also refreshes the README's, in docs/screenshots/).
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3

import aiohttp
import pytest
from playwright.async_api import expect

from tests.debug_ui.browser import PageErrors, screenshot
from tests.debug_ui.conftest import NOTE
from tests.services.kafka import end_offsets, produce_json
from tests.worker.harness import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.asyncio(loop_scope="module")]


def node(scope, task_id: str):
    return scope.locator(f'[data-testid=task-node][data-task-id="{task_id}"]')


def own(node_locator, testid: str):
    """An element of this task's own card, not of its replacements nested below it."""
    return node_locator.locator(f":scope > .task [data-testid={testid}]")


async def test_the_overview_shows_partitions_with_offsets_and_lag_the_pool_and_the_latest_events(debug_worker, page):
    errors = PageErrors(page)
    committed = await asyncio.to_thread(debug_worker.committed)
    await page.goto(debug_worker.page_url("overview"))

    row = page.locator('[data-testid=partition-row][data-partition="0"]')
    await expect(row.locator("td").nth(1)).to_have_text(f"{committed[0]:,}")  # committed
    await expect(row.locator("td").nth(4)).to_have_text("0")  # lag: all consumed
    await expect(page.get_by_test_id("stat-pool")).to_contain_text("0 / 2")
    await expect(page.get_by_test_id("stat-backpressure")).to_contain_text("flowing")
    await expect(page.get_by_text("awaiting the sinks' confirmation")).to_be_visible()  # the second bound, beside the work's
    await expect(page.get_by_test_id("overview-events").locator("[data-testid=event-row]").first).to_be_visible()
    await expect(page.get_by_test_id("worker-name")).to_contain_text(debug_worker.worker.worker_id)
    await expect(page.get_by_test_id("ws-status")).to_have_text("live")

    # Two slow tasks: the page shows them in their slots while they run.
    slow = {"job_id": "slow", "ranges": [[30, 32], [40, 42]], "note": "sleep 6"}
    await asyncio.to_thread(produce_json, debug_worker.bootstrap, debug_worker.source, [slow], 0)
    slots = page.get_by_test_id("pool-table").get_by_test_id("slot-row")
    await expect(slots).to_have_count(2, timeout=30_000)
    await expect(slots.filter(has_text="30 32")).to_have_count(1)
    await expect(slots.filter(has_text="40 42")).to_have_count(1)
    await expect(page.get_by_test_id("stat-pool")).to_contain_text("2 / 2")
    await screenshot(page, "overview", docs=True)
    await expect(slots).to_have_count(0, timeout=60_000)  # done: the slots are free again
    errors.check()


async def test_a_message_trace_shows_every_task_with_exit_code_and_output_and_replacements_as_a_tree(debug_worker, page):
    errors = PageErrors(page)
    offset = debug_worker.offsets["split"]
    group = debug_worker.handler.groups[offset]
    await page.goto(debug_worker.page_url("trace"))
    await page.get_by_test_id("recent-messages").get_by_text(f"0/{offset}", exact=True).click()

    tree = page.get_by_test_id("task-tree")
    await expect(tree.locator("[data-testid=task-node]")).to_have_count(group.total)
    stats = page.get_by_test_id("trace-group")
    for name in ("total", "succeeded", "failed", "replaced"):
        await expect(stats.get_by_test_id(f"group-{name}")).to_have_text(str(getattr(group, name)))
    assert (group.total, group.succeeded, group.failed, group.replaced) == (6, 3, 1, 2)

    # The tree is the replacement chain: every task sits under the task it replaced.
    for task in group.tasks:
        if task.parent_task_id:
            nested = node(tree, task.parent_task_id).locator(
                f':scope > [data-testid=task-children] > [data-task-id="{task.task_id}"]')
        else:
            nested = tree.locator(f':scope > [data-task-id="{task.task_id}"]')
        await expect(nested).to_have_count(1)
        await expect(own(node(tree, task.task_id), "task-args")).to_contain_text(f"{task.args[0]} {task.args[1]}")

    for result in group.results:  # succeeded: exit 0, the output exactly as the program printed it
        item = node(tree, result.task.task_id)
        await expect(item).to_have_attribute("data-status", "succeeded")
        await expect(own(item, "task-exit")).to_have_text("exit 0")
        assert await own(item, "task-stdout").text_content() == result.stdout
        await expect(own(item, "task-duration")).to_have_text(re.compile(r"\d"))
        await expect(own(item, "task-slot-wait")).to_have_text(re.compile(r"\d"))
    [error] = group.errors  # the range past 100 failed for good
    item = node(tree, error.task.task_id)
    await expect(item).to_have_attribute("data-status", "failed")
    await expect(own(item, "task-exit")).to_have_text(f"exit {error.exit_code}")
    await expect(own(item, "task-stderr")).to_contain_text("bad input 100-101")
    finished = {r.task.task_id for r in group.results} | {error.task.task_id}
    for task in group.tasks:
        if task.task_id not in finished:  # split on "out of memory"
            item = node(tree, task.task_id)
            await expect(item).to_have_attribute("data-status", "replaced")
            await expect(own(item, "task-exit")).to_have_text("exit 137")
            await expect(own(item, "task-stderr")).to_contain_text("out of memory")

    await expect(page.get_by_test_id("trace-deliveries").locator("tbody tr:not(.empty)")).to_have_count(1)
    await expect(page.get_by_test_id("trace-commit")).to_contain_text("offset")
    await screenshot(page, "trace", docs=True)
    errors.check()


async def test_the_trace_of_a_message_the_recorder_never_saw_says_why_it_may_be_missing(debug_worker, page):
    errors = PageErrors(page)
    await page.goto(debug_worker.page_url("trace/0/987654"))
    await expect(page.get_by_test_id("trace-missing")).to_contain_text("nothing about message 0/987654")
    await expect(page.get_by_test_id("task-tree")).to_have_count(0)
    errors.check()


async def test_a_failed_task_links_to_the_trace_of_its_message(debug_worker, page):
    errors = PageErrors(page)
    group = debug_worker.handler.groups[debug_worker.offsets["split"]]
    [error] = group.errors
    await page.goto(debug_worker.page_url("tasks"))
    row = page.get_by_test_id("failed-table").locator(f'[data-testid=task-row][data-task-id="{error.task.task_id}"]')
    await row.get_by_test_id("trace-link").click()  # a task event carries the offset of its first message

    await expect(page).to_have_url(re.compile(rf"#/trace/0/{debug_worker.offsets['split']}$"))
    item = node(page.get_by_test_id("task-tree"), error.task.task_id)
    await expect(item).to_have_attribute("data-status", "failed")
    errors.check()


async def test_untrusted_message_text_is_shown_as_text_and_never_run(debug_worker, page):
    offset = debug_worker.offsets["split"]
    await page.goto(debug_worker.page_url(f"trace/0/{offset}"))
    tree = page.get_by_test_id("task-tree")
    await expect(tree.locator("[data-testid=task-stdout]").first).to_contain_text(NOTE)
    await expect(tree.locator("[data-testid=task-args]").first).to_contain_text("<b>note</b>")
    await expect(page.locator("img")).to_have_count(0)
    await expect(tree.locator("pre b, code b")).to_have_count(0)
    assert await page.evaluate("window.__pwned") is None


async def test_a_message_produced_while_the_events_page_is_open_arrives_live_over_the_websocket(debug_worker, page):
    errors = PageErrors(page)
    await page.goto(debug_worker.page_url("events"))
    await expect(page.get_by_test_id("ws-status")).to_have_text("live")
    await expect(page.get_by_test_id("events-status")).to_contain_text("newest first")
    await page.evaluate("window.__sameDocument = true")

    job = {"job_id": "live", "ranges": [[20, 22]], "note": "arrived live"}
    [(partition, offset)] = await asyncio.to_thread(produce_json, debug_worker.bootstrap, debug_worker.source, [job], 0)
    consumed = page.locator("[data-testid=event-row][data-kind=consumed]").filter(
        has=page.get_by_text(f"{partition}/{offset}", exact=True))
    await expect(consumed).to_have_count(1, timeout=60_000)
    await expect(consumed).to_have_class(re.compile(r"\bfresh\b"))  # added by the live feed, not by a load
    await expect(page.locator("[data-testid=event-row][data-kind=task_finished].fresh").first).to_be_visible(timeout=60_000)
    assert await page.evaluate("window.__sameDocument") is True  # no reload happened
    await expect(page.get_by_test_id("live-count")).not_to_have_text("0 live")
    await screenshot(page, "events", docs=True)
    errors.check()


async def test_the_probe_runs_a_pasted_message_and_shows_would_be_deliveries_and_its_trace(debug_worker, page):
    errors = PageErrors(page)
    source_end = await asyncio.to_thread(end_offsets, debug_worker.bootstrap, debug_worker.source)
    await wait_until(lambda: debug_worker.committed() == source_end, 60, "every message so far committed")
    committed = await asyncio.to_thread(debug_worker.committed)
    produced = await asyncio.to_thread(end_offsets, debug_worker.bootstrap, debug_worker.out)
    await page.goto(debug_worker.page_url("probe"))
    message = {"key": "k-probe", "value": {"job_id": "probed", "ranges": [[0, 4]], "note": "probing"}}
    await page.get_by_test_id("probe-input").fill(json.dumps(message, indent=2))
    await page.get_by_test_id("probe-run").click()

    await expect(page.get_by_test_id("probe-done")).to_be_visible(timeout=120_000)
    group = page.get_by_test_id("probe-group")
    for name, value in (("total", 3), ("succeeded", 2), ("failed", 0), ("replaced", 1)):  # [0,4) -> [0,2) + [2,4)
        await expect(group.get_by_test_id(f"group-{name}")).to_have_text(str(value))
    tree = page.get_by_test_id("probe-task-tree")
    await expect(tree.locator("[data-testid=task-node]")).to_have_count(3)
    await expect(tree.locator(":scope > [data-testid=task-node] > [data-testid=task-children] > li")).to_have_count(2)
    deliveries = page.get_by_test_id("probe-deliveries")
    await expect(deliveries.locator(".sink")).to_have_count(1)
    payload = await deliveries.get_by_test_id("probe-payloads").text_content()
    assert json.loads(payload.splitlines()[0])["data"] == {"job_id": "probed", "numbers": [0, 1, 2, 3], "tasks": 3, "replaced": 1}
    await screenshot(page, "probe", docs=True)

    # Nothing left the worker: no output produced, no offset committed.
    assert await asyncio.to_thread(end_offsets, debug_worker.bootstrap, debug_worker.out) == produced
    assert await asyncio.to_thread(debug_worker.committed) == committed
    errors.check()


async def test_an_uploaded_file_holding_only_the_value_is_probed_as_the_message_value(debug_worker, page, tmp_path):
    errors = PageErrors(page)
    upload = tmp_path / "job.json"
    upload.write_text(json.dumps({"job_id": "uploaded", "ranges": [[5, 7], [200, 201]], "note": "from a file"}))
    await page.goto(debug_worker.page_url("probe"))
    await page.get_by_test_id("probe-file").set_input_files(str(upload))
    await expect(page.get_by_test_id("probe-input")).to_have_value(upload.read_text())
    await page.get_by_test_id("probe-run").click()

    await expect(page.get_by_test_id("probe-done")).to_contain_text("the message's value", timeout=120_000)
    group = page.get_by_test_id("probe-group")
    for name, value in (("total", 2), ("succeeded", 1), ("failed", 1), ("replaced", 0)):
        await expect(group.get_by_test_id(f"group-{name}")).to_have_text(str(value))
    failed = page.locator("[data-testid=probe-task-tree] [data-testid=task-node][data-status=failed]")
    await expect(failed.get_by_test_id("task-stderr")).to_contain_text("bad input 200-201")
    await expect(page.get_by_test_id("probe-payload")).to_contain_text('"job_id": "uploaded"')
    errors.check()


async def test_with_a_token_the_api_refuses_requests_without_it_and_the_page_says_how_to_pass_it(debug_worker, page):
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{debug_worker.url}/api/overview") as response:
            assert response.status == 401
        async with http.get(f"{debug_worker.url}/api/overview",
                            headers={"Authorization": "Bearer wrong"}) as response:
            assert response.status == 401
        async with http.get(f"{debug_worker.url}/api/overview",
                            headers={"Authorization": f"Bearer {debug_worker.token}"}) as response:
            assert response.status == 200

    errors = PageErrors(page, allowed=("401", "WebSocket"))
    await page.goto(debug_worker.page_url("overview", token=None))
    banner = page.get_by_test_id("error-banner")
    await expect(banner).to_be_visible()
    await expect(banner).to_have_attribute("data-status", "401")
    await expect(banner).to_contain_text("?token=")
    await expect(page.get_by_test_id("ws-status")).to_have_attribute("data-state", "offline")  # the feed refused too
    await screenshot(page, "token-missing")
    errors.check()

    await page.goto(debug_worker.page_url("overview"))
    await page.reload()
    await expect(page.get_by_test_id("partition-row")).to_have_count(1)
    await expect(page.get_by_test_id("error-banner")).to_be_hidden()


async def test_the_download_button_saves_a_copy_of_the_recorder_database(debug_worker, page, tmp_path):
    errors = PageErrors(page)
    await page.goto(debug_worker.page_url("overview"))
    async with page.expect_download() as info:
        await page.get_by_test_id("download-db").click()
    download = await info.value
    saved = tmp_path / download.suggested_filename
    await download.save_as(str(saved))
    assert saved.read_bytes()[:16] == b"SQLite format 3\x00"
    with sqlite3.connect(saved) as db:
        kinds = {kind for (kind,) in db.execute("SELECT DISTINCT kind FROM events")}
    assert {"consumed", "task_started", "task_finished", "task_failed", "task_replaced", "message_complete",
            "delivered", "dead_lettered", "committed"} <= kinds
    errors.check()


@pytest.mark.parametrize("route, testid, shot", [
    ("tasks?min_ms=0", "slow-table", "tasks"), ("dlq", "dlq-table", "dlq"), ("config", "config-view", "config"),
    ("fleet", "fleet-workers", "fleet"), ("links", "links-custom", "links"),
    ("events?kind=task_failed", "events-table", "events-filtered"),
])
async def test_every_view_renders_from_the_recorder(debug_worker, page, route, testid, shot):
    errors = PageErrors(page)
    await page.goto(debug_worker.page_url(route))
    await expect(page.get_by_test_id(testid)).to_be_visible()
    view = page.get_by_test_id("view")
    if route.startswith("tasks"):
        await expect(page.get_by_test_id("slow-table").get_by_test_id("task-row").first).to_be_visible()
        await expect(page.get_by_test_id("failed-table").get_by_test_id("task-row").first).to_be_visible()
    elif route == "dlq":
        await expect(page.get_by_test_id("dlq-table").locator("tbody tr:not(.empty)")).to_have_count(1)
        await expect(page.get_by_test_id("dlq-table")).to_contain_text(f"0/{debug_worker.offsets['bad']}")
    elif route == "config":
        await expect(view).to_contain_text(debug_worker.source)
        assert debug_worker.token not in await view.text_content()  # masked
    elif route == "fleet":
        await expect(page.get_by_test_id("fleet-worker")).to_have_count(1)
        await expect(page.get_by_test_id("fleet-events").locator("[data-testid=event-row]").first).to_be_visible()
    elif route == "links":
        await expect(page.get_by_test_id("links-prometheus").locator("a").first).to_have_attribute(
            "href", re.compile(r"^http://prometheus\.invalid:9090/"))
        custom = page.get_by_test_id("links-custom")
        await expect(custom.locator("a")).to_have_count(1)  # the javascript: one is shown, not linked
        await expect(custom).to_contain_text("Not a link")
    else:
        await expect(page.locator("[data-testid=event-row]")).not_to_have_count(0)
        await expect(page.locator("[data-testid=event-row]:not([data-kind=task_failed])")).to_have_count(0)
    await screenshot(page, shot, docs=shot in ("tasks", "fleet", "config"))
    errors.check()
