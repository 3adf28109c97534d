"""Message-group accounting on the real engine, with random outcome trees (hypothesis).

Each message gets a random list of task plans. A plan is a tree: the task succeeds, fails
and is skipped, fails n times and is retried (succeeding, or exhausting its retries), or
fails and is replaced by child plans (which may be replaced in turn). Some tasks also work
for other messages of the window (fan-in). Real subprocesses run with random short sleeps,
so outcomes arrive in random order. Whatever the tree, every group fires exactly once with
the counts the tree implies, ``total == succeeded + failed + replaced`` holds, and no commit
passes a message whose group has not completed.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import knarr
from knarr.api.messages import SourceMessage
from knarr.config.loading import config_from_dict
from knarr.engine.worker import Worker
from knarr.sources.memory import MemorySource
from tests.worker.harness import BEHAVE

MAX_RETRIES = 2


@dataclass
class Plan:
    kind: str  # succeed | skip | retry_ok | retry_exhausted | replace
    fails: int = 0
    sleep_ms: int = 0
    children: list[Plan] = field(default_factory=list)
    extra_offsets: list[int] = field(default_factory=list)

    def counts(self) -> tuple[int, int, int, int]:
        """(total, succeeded, failed, replaced) this plan contributes to a group."""
        if self.kind == "replace":
            sub = [c.counts() for c in self.children]
            return (1 + sum(s[0] for s in sub), sum(s[1] for s in sub), sum(s[2] for s in sub), 1 + sum(s[3] for s in sub))
        if self.kind in ("succeed", "retry_ok"):
            return 1, 1, 0, 0
        return 1, 0, 1, 0


def plans(depth: int = 2):
    leaf = st.builds(
        Plan,
        kind=st.sampled_from(["succeed", "skip", "retry_ok", "retry_exhausted"]),
        fails=st.integers(1, MAX_RETRIES),
        sleep_ms=st.integers(0, 20),
    )
    if depth == 0:
        return leaf
    return st.one_of(
        leaf,
        st.builds(Plan, kind=st.just("replace"), sleep_ms=st.integers(0, 20),
                  children=st.lists(plans(depth - 1), min_size=1, max_size=3)),
    )


windows = st.lists(st.lists(plans(), min_size=0, max_size=3), min_size=1, max_size=5)


class TreeHandler(knarr.BaseHandler):
    def __init__(self, tree: list[list[Plan]], workdir: Path) -> None:
        self.tree = tree
        self.workdir = workdir
        self.ids = itertools.count()
        self.fired: dict[int, list[knarr.MessageGroup]] = {}

    def _task(self, plan: Plan, offsets: list[int]) -> knarr.ExecutorTask:
        n = next(self.ids)
        args = [f"sleep=0.{plan.sleep_ms:03d}"]
        if plan.kind in ("retry_ok", "retry_exhausted"):
            failfile = self.workdir / f"fail-{n}"
            failfile.write_text(str(plan.fails if plan.kind == "retry_ok" else MAX_RETRIES + 1))
            args.append(f"failfile={failfile}")
        elif plan.kind in ("skip", "replace"):
            args.append("exit=4")
        return knarr.ExecutorTask(task_id=f"t{n}", args=args, source_offsets=offsets, metadata={"plan": plan})

    async def arrange(self, messages, pending):
        tasks = []
        for msg in messages:
            for plan in self.tree[msg.offset]:
                extra = [o for o in plan.extra_offsets if o != msg.offset]
                tasks.append(self._task(plan, [msg.offset, *extra]))
        return tasks

    async def on_error(self, task, error):
        plan: Plan = task.metadata["plan"]
        if plan.kind == "replace":
            return [self._task(child, list(task.source_offsets)) for child in plan.children]
        if plan.kind in ("retry_ok", "retry_exhausted"):
            return knarr.ErrorAction.RETRY
        return knarr.ErrorAction.SKIP

    async def on_message_complete(self, group):
        self.fired.setdefault(group.source_message.offset, []).append(group)


def expected_counts(tree: list[list[Plan]]) -> dict[int, tuple[int, int, int, int]]:
    out = {o: [0, 0, 0, 0] for o in range(len(tree))}
    for origin, plans_ in enumerate(tree):
        for plan in plans_:
            for o in {origin, *plan.extra_offsets}:
                for i, v in enumerate(plan.counts()):
                    out[o][i] += v
    return {o: tuple(v) for o, v in out.items()}


@st.composite
def trees_with_fan_in(draw):
    tree = draw(windows)
    for plans_ in tree:
        for plan in plans_:
            plan.extra_offsets = draw(st.lists(st.integers(0, len(tree) - 1), max_size=2, unique=True))
    return tree


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees_with_fan_in())
def test_every_group_fires_once_with_the_counts_its_outcome_tree_implies(tree):
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        handler = TreeHandler(tree, workdir)
        messages = [SourceMessage(topic="t", partition=0, offset=o, value=b"{}") for o in range(len(tree))]
        source = MemorySource(messages)
        commit_violations = []
        original_commit = source.commit_now

        async def checked_commit(commits):
            for _, offset in commits.items():
                unfinished = [o for o in range(offset) if o not in handler.fired]
                if unfinished:
                    commit_violations.append((offset, unfinished))
            return await original_commit(commits)

        source.commit_now = checked_commit
        config = config_from_dict({
            "executor": {"binary_path": BEHAVE, "max_executors": 3, "max_retries": MAX_RETRIES, "window_size": 10,
                         "retry_backoff_base_seconds": 0.001, "retry_backoff_max_seconds": 0.002},
            "sinks": {"filesystem": {"out": {"base_path": str(workdir / "out")}}},
            "dlq": {"path": str(workdir / "dlq.jsonl")},
            "metrics": {"enabled": False},
            "logging": {"level": "ERROR", "format": "console"},
        })
        worker = Worker(config, handler, source=source)
        code = asyncio.run(asyncio.wait_for(worker.run(), 60))

    assert code == 0
    assert not commit_violations, f"committed past unfinished messages: {commit_violations}"
    assert sorted(handler.fired) == list(range(len(tree))), "a message never completed"
    expected = expected_counts(tree)
    for offset, groups in handler.fired.items():
        assert len(groups) == 1, f"group of offset {offset} fired {len(groups)} times"
        g = groups[0]
        assert g.total == g.succeeded + g.failed + g.replaced
        assert (g.total, g.succeeded, g.failed, g.replaced) == expected[offset], f"offset {offset}"
        assert g.is_empty == (expected[offset][0] == 0)
    assert source.committed == {0: len(tree)}
    stats = worker.stats
    assert stats.messages == len(tree)
    assert stats.tasks == stats.succeeded + stats.failed + stats.replaced
    every_plan = [plan for plans_ in tree for plan in plans_]  # each task once, however many groups it feeds
    assert (stats.tasks, stats.succeeded, stats.failed, stats.replaced) == tuple(
        sum(plan.counts()[i] for plan in every_plan) for i in range(4))
