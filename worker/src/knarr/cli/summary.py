"""The one-screen summary at the end of a bounded run. Pure: counts in, text out."""

from __future__ import annotations

from knarr.errors import ExitCode
from knarr.runtime.stats import RunStats

SHORT_MEANINGS = {
    ExitCode.OK: "everything was done",
    ExitCode.FATAL: "a fatal error stopped the run; nothing past unfinished work was committed",
    ExitCode.WORK_FAILED: "finished, but some work failed (see above)",
    ExitCode.DRAIN_INCOMPLETE: "stopped before in-flight work finished; it will be replayed",
}


def run_summary(stats: RunStats, source: str, seconds: float, exit_code: int) -> str:
    status = {ExitCode.OK: "done", ExitCode.WORK_FAILED: "done, with failed work"}.get(exit_code, "stopped")
    rate = f", {stats.messages / seconds:.1f} messages/s" if seconds > 0 and stats.messages else ""
    lines = [
        f"knarr run {status}: {source} in {seconds:.1f}s{rate}",
        f"  messages       {stats.messages:>8}   ({stats.empty_messages} without tasks)",
        f"  tasks          {stats.tasks:>8}   {stats.succeeded} succeeded, {stats.failed} failed, {stats.replaced} replaced",
        f"  outputs        {stats.outputs:>8}   delivered to sinks",
        f"  dead-lettered  {stats.dead_lettered:>8}   payloads",
    ]
    if stats.failed:
        lines.append("  failed tasks are logged at WARNING with their task id, offsets, exit code and stderr")
    lines.append(f"  exit code {exit_code}: {SHORT_MEANINGS.get(exit_code, 'see the exit codes in the README')}")
    return "\n".join(lines)
