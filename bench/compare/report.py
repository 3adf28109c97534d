"""The race's table (markdown) and the machine it ran on."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, replace
from pathlib import Path

from rounds import host_pace, pace_text
from rows import ROWS, Figure

from knarr.config.models import ExecutorConfig

DRAKKAR_BACKPRESSURE = "32/4"  # Drakkar 2.4.0's high/low multipliers


def _knarr_backpressure() -> str:
    fields = ExecutorConfig.model_fields
    return f"{fields['backpressure_high_multiplier'].default}/{fields['backpressure_low_multiplier'].default}"


ENGINE_NAMES = {"knarr": "knarr", "drakkar": "Drakkar 2.4.0"}
COLUMNS = ("workload", "engine", "msgs/s", "tasks/s", "CPU/task", "peak RSS", "p50 latency", "p99 latency", "load")


@dataclass(frozen=True)
class Machine:
    cores: int
    model: str
    memory: str
    kernel: str
    load_before: tuple[float, float, float]
    paces: tuple[float, ...] = ()  # the host's pace for interpreted code (bench/rounds.py), before and after
    load_after: tuple[float, float, float] | None = None

    @classmethod
    def now(cls) -> Machine:
        return cls(os.cpu_count() or 0, _cpu_model(), _memory(), platform.release(), os.getloadavg(),
                   tuple(host_pace()))

    def finish(self) -> Machine:
        return replace(self, load_after=os.getloadavg(), paces=self.paces + tuple(host_pace()))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory() -> str:
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        return f"{kib / 2**20:.1f} GiB RAM"
    except (OSError, ValueError, IndexError):
        return "RAM unknown"


def _load(load: tuple[float, float, float] | None) -> str:
    return " / ".join(f"{x:.2f}" for x in load) if load else "?"


# --- cells ----------------------------------------------------------------------------------------
def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


def _latency(ms: float) -> str:
    return f"{ms:,.0f} ms" if ms < 10_000 else f"{ms / 1000:,.1f} s"


def _ratio(a: float, b: float) -> str:
    if b <= 0:
        return "–"
    r = a / b
    return f"{r:.1f}×" if r >= 10 else f"{r:.2f}×"


def cells(f: Figure) -> list[str]:
    return [_rate(f.msgs_per_s), _rate(f.tasks_per_s), f"{f.cpu_us_per_task:,.0f} µs", f"{f.rss_mib:.0f} MiB",
            _latency(f.latency_ms(0.50)), _latency(f.latency_ms(0.99)), f"{f.load:.1f}"]


def ratio_cells(a: Figure, b: Figure) -> list[str]:
    return [_ratio(a.msgs_per_s, b.msgs_per_s), _ratio(a.tasks_per_s, b.tasks_per_s),
            _ratio(a.cpu_us_per_task, b.cpu_us_per_task), _ratio(a.rss_mib, b.rss_mib),
            _ratio(a.latency_ms(0.50), b.latency_ms(0.50)), _ratio(a.latency_ms(0.99), b.latency_ms(0.99)), ""]


def table(figures: list[Figure]) -> list[str]:
    """One markdown table: each row's engines, then their ratios (knarr / Drakkar)."""
    found = {(f.row.name, f.engine): f for f in figures}
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for name, row in ROWS.items():
        ours, theirs = found.get((name, "knarr")), found.get((name, "drakkar"))
        if ours is None and theirs is None:
            continue
        title = row.title
        for f in (ours, theirs):
            if f is not None:
                engine = ENGINE_NAMES[f.engine] + (" (persistent)" if row.persistent else "")
                lines.append(f"| {title} | {engine} | " + " | ".join(cells(f)) + " |")
                title = ""
        if row.persistent and ours is not None:
            # Drakkar has no persistent mode: set against Drakkar's and knarr's own spawn runs of W1.
            for other, label in ((found.get(("w1-bounded", "drakkar")), "persistent / Drakkar, W1 same limits"),
                                 (found.get(("w1-bounded", "knarr")), "persistent / knarr spawn, W1 same limits")):
                if other is not None:
                    lines.append(f"|  | *{label}* | " + " | ".join(ratio_cells(ours, other)) + " |")
        elif ours is not None and theirs is not None:
            lines.append("|  | *knarr / Drakkar* | " + " | ".join(ratio_cells(ours, theirs)) + " |")
    return lines


def render(figures: list[Figure], machine: Machine, args, seconds: float, pythons: dict[str, str],
           warmed: str = "") -> str:
    """The table and what it was measured on; ``pythons``: each engine's interpreter, as the harness found it;
    ``warmed``: the broker's warm-up before the rows (engine.warm_up), if any."""
    on = "; ".join(f"{ENGINE_NAMES.get(engine, engine)} on {python}" for engine, python in pythons.items())
    counts = {f.row.workload: f.messages for f in figures}
    lines = [
        "### make bench-compare: knarr vs Drakkar 2.4.0",
        "",
        *table(figures),
        "",
        "Ratios are knarr / Drakkar: above 1 is better for msgs/s and tasks/s, below 1 is better for CPU, "
        "RSS and latency. Load: the machine's 1-minute load average as the run began. CPU/task is the worker process's own CPU (utime + stime, every thread, children "
        "excluded) over the run, per task. Latency is output record time − input record time per message, "
        "with every message produced at once (mostly time queued). \"Same limits\": both engines at "
        f"max_executors {args.limits.max_executors}, window_size {args.limits.window_size}, max_poll_records "
        f"{args.limits.max_poll_records}, backpressure high/low multipliers "
        f"{args.limits.backpressure_high_multiplier}/{args.limits.backpressure_low_multiplier}. Defaults: each "
        f"engine's own (both 4 executors, window 100; backpressure multipliers {_knarr_backpressure()} in knarr, "
        f"{DRAKKAR_BACKPRESSURE} in Drakkar). Metrics servers and Drakkar's debug "
        "UI off in every row; every run's output checked complete and correct.",
        "",
        f"Machine: {machine.cores} cores, {machine.model}, {machine.memory}, Linux {machine.kernel}; "
        f"load average (1/5/15 min) {_load(machine.load_before)} before, {_load(machine.load_after)} after; "
        f"the host's pace for interpreted code, before and after: "
        f"{pace_text(machine.paces) if machine.paces else 'not measured'}. "
        f"Messages: W1 {counts.get('w1', '–')}, W2 {counts.get('w2', '–')} (×10 tasks); one local Kafka broker; "
        f"harness on Python {platform.python_version()}, {on}; {seconds:.0f} s in all"
        f"{f' ({warmed})' if warmed else ''}. "
        "A shared machine: other load moves these figures, so compare engines within one run, not across runs.",
    ]
    return "\n".join(lines) + "\n"
