"""``knarr run``: load the config and handler, run a worker, and end a bounded run with a summary."""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time

from knarr.cli.summary import run_summary
from knarr.config.loading import load_config
from knarr.config.root import CONFIG_PATH_ENV, KnarrConfig
from knarr.errors import ExitCode, UsageError
from knarr.loader import load_handler_class
from knarr.observability.progress import progress_bar
from knarr.observability.termination import describe_error, record_exit
from knarr.observability.task_failures import task_failures
from knarr.engine import event_loop
from knarr.engine.containment import contain_tasks
from knarr.engine.worker import Worker
from knarr.supervisor.machine import available_cpus, follow_supervisor
from knarr.supervisor.plan import members, process_count

PROGRESS_SECONDS = 0.1


def handler_spec(config: KnarrConfig, option: str | None) -> str:
    spec = option or config.handler
    if not spec:
        raise UsageError("no handler: pass --handler module:Class (or path/to/file.py:Class), "
                         "or set `handler:` in the config")
    return spec


def require_config_path(config_path: str | None) -> str:
    """The config file named by --config or $KNARR_CONFIG."""
    path = config_path or os.environ.get(CONFIG_PATH_ENV)
    if not path:
        raise UsageError(f"give --config PATH or set {CONFIG_PATH_ENV}")
    return path


def load(config_path: str | None, handler_option: str | None) -> tuple[KnarrConfig, str]:
    config = load_config(require_config_path(config_path))
    return config, handler_spec(config, handler_option)


def run_command(config_path: str | None, handler_option: str | None, progress: bool = True,
                processes: int | None = None) -> int:
    config, spec = load(config_path, handler_option)
    if not follow_supervisor():
        print("knarr run: the supervisor that started this worker process is gone; not starting", file=sys.stderr)
        return ExitCode.OK
    count = process_count(config, processes, available_cpus())
    if count > 1:
        from knarr.supervisor.processes import run_supervised  # its HTTP client: only a supervisor loads it

        base_name = os.environ.get(config.worker_name_env) or f"knarr-{os.getpid():x}"
        return run_supervised(config, members(config, count, base_name), spec, config_path or os.environ.get(CONFIG_PATH_ENV))
    worker = Worker(config, load_handler_class(spec)())
    worker.hard_deadline = True  # a process of its own: a shutdown that overruns its deadline exits
    bounded = config.source.type == "local"
    started = time.monotonic()
    # This process is the worker's own: it may become the subreaper and cgroup of its tasks.
    with contain_tasks(config.executor.task_cgroup):
        code = event_loop.run(_run_with_progress(worker, progress and bounded), config.event_loop,
                              config.gc_threshold)
    task_failures.flush(now=math.inf)  # a storm's last "N more" line, even if its window was still open
    if not bounded:
        record_exit(code, exit_detail(code, worker))
        return code
    code = bounded_exit_code(code, worker)
    record_exit(code, exit_detail(code, worker))
    source = worker.source
    print(run_summary(worker.stats, source=_shown(str(source.topic)) if source else "the local source",
                      seconds=time.monotonic() - started, exit_code=code), file=sys.stderr)
    if source is not None and getattr(source, "total", None) == 0:
        print(f"  nothing left to do: every line is committed in {_shown(str(source.offsets_path))}; "
              "delete that file to process the input again", file=sys.stderr)
    return code


def _shown(path: str) -> str:
    """A path as short as it can be said from here."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def exit_detail(code: int, worker: Worker) -> str:
    """What the termination message says about an exit no exception explained."""
    if worker.fatal is not None:
        return describe_error(worker.fatal)
    if code == ExitCode.DRAIN_INCOMPLETE:
        return (f"in-flight work did not finish within executor.drain_timeout_seconds "
                f"({worker.config.executor.drain_timeout_seconds:g}s); its messages will be replayed")
    if code == ExitCode.WORK_FAILED:
        return f"{worker.stats.failed} task(s) failed for good, {worker.stats.dead_lettered} payload(s) dead-lettered"
    return ""


def bounded_exit_code(code: int, worker: Worker) -> int:
    """A bounded run that finished but left failed work behind says so in its exit code."""
    if code == ExitCode.OK and (worker.stats.failed or worker.stats.dead_lettered):
        return ExitCode.WORK_FAILED
    return code


async def _run_with_progress(worker: Worker, show: bool) -> int:
    with progress_bar("messages", unit="msg", enabled=show) as bar:
        run = asyncio.create_task(worker.run())
        if bar is not None:
            while not run.done():
                _draw(bar, worker)
                await asyncio.wait({run}, timeout=PROGRESS_SECONDS)
            _draw(bar, worker)
        return await run


def _draw(bar, worker: Worker) -> None:
    total = getattr(worker.source, "total", None)
    if total is not None and bar.total != total:
        bar.total = total
    stats = worker.stats
    bar.n = stats.messages
    bar.set_postfix_str(f"tasks {stats.tasks}, failed {stats.failed}, dlq {stats.dead_lettered}", refresh=False)
    bar.refresh()
