"""The bytecodes the worker's interpreted code executes per task, by function: where the engine's
Python work goes, counted rather than sampled.

The engine's cost per task is spread thin (no Python function above a few percent of a profile), and
both a sampling profiler and cProfile blur that: the first by its sampling, the second by adding
more to a short call than to a long one. Counting bytecodes does neither. Each run traces every
Python thread of the worker (``sys.settrace`` with opcode events) and counts, per function, the
bytecodes it executed itself and how many times it was called. The count is the difference of two
runs of bench/persistent.py's echo workload (one task per message, a Kafka output each) in a
process of their own each: one of ``--messages`` and one of ``--base`` messages, so start-up and
shutdown cancel out and what is left, over the difference in tasks, is what a task costs.

Unlike ``make bench-instructions`` it counts persistent mode too (no valgrind needed), and it
names the functions; unlike it, it counts nothing compiled (uvloop, librdkafka, pydantic-core, the
native runner, the interpreter's own work around a bytecode), and a bytecode that calls into C
counts as one. Read it for what the engine's Python does per task and which functions do it, and
compare counts across commits on the same Python (another version compiles to other bytecodes).
A traced worker runs some fifty times slower, so timers weigh more than in a real run, alike in
both runs of a pair.

With ``--recorder`` the worker runs with the flight recorder on (the spec's defaults): what the
recorder's events cost the event loop and its thread, counted as the rest, where ``make
bench-recorder``'s timed pairs spread by tens of percent on a busy host.

    uv run python bench/bytecodes.py [--mode spawn|persistent] [--recorder] [--messages 2400] [--base 400] [--top 40]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from instructions import MODES  # noqa: E402


def function_name(key: CodeType | tuple[CodeType, str]) -> str:
    """``package/module.py:function:line`` for a code object: the path from the package (or the
    standard library's directory) down, so names read the same on every machine. For code compiled
    from a string, counted with its class (Counter): ``<string>:Class.function``."""
    if isinstance(key, tuple):
        code, owner = key
        return f"<string>:{owner}.{code.co_name}"
    code = key
    path = code.co_filename
    for cut in ("site-packages/", "/src/", "/lib/python3"):
        if cut in path:
            path = path.split(cut, 1)[1]
            if cut == "/lib/python3":
                path = path.split("/", 1)[1] if "/" in path else path
            break
    else:
        path = Path(path).name
    return f"{path}:{code.co_name}:{code.co_firstlineno}"


def _key(frame: FrameType) -> CodeType | tuple[CodeType, str]:
    """What a call is counted under: its code, and for code compiled from a string (the ``__init__``
    dataclasses write) the class of its ``self`` too, or every dataclass's would count as one."""
    code = frame.f_code
    if code.co_filename == "<string>" and "self" in code.co_varnames[:code.co_argcount]:
        return code, type(frame.f_locals["self"]).__qualname__
    return code


class Counter:
    """Bytecodes executed and calls made, per function, on every thread it is installed on."""

    def __init__(self) -> None:
        self.bytecodes: collections.Counter[CodeType | tuple[CodeType, str]] = collections.Counter()
        self.calls: collections.Counter[CodeType | tuple[CodeType, str]] = collections.Counter()

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        key = _key(frame)
        self.calls[key] += 1
        frame.f_trace_opcodes = True
        bytecodes = self.bytecodes

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                bytecodes[key] += 1
            return local
        return local

    def install(self) -> None:
        threading.settrace(self.trace)
        sys.settrace(self.trace)

    def remove(self) -> None:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]

    def by_name(self) -> dict[str, list[int]]:
        """{function name: [bytecodes, calls]} (code objects of one name added together)."""
        named: dict[str, list[int]] = {}
        for key in self.calls.keys() | self.bytecodes.keys():
            entry = named.setdefault(function_name(key), [0, 0])
            entry[0] += self.bytecodes[key]
            entry[1] += self.calls[key]
        return named


def per_task(small: tuple[int, dict[str, list[int]]], large: tuple[int, dict[str, list[int]]]) -> dict[str, list[float]]:
    """{function: [bytecodes, calls] per task} from two runs, (tasks, counts) each: what the larger
    run did more, over the tasks it ran more. Functions whose difference is not positive are left out."""
    (tasks_small, small_counts), (tasks_large, large_counts) = small, large
    if tasks_large <= tasks_small:
        raise ValueError(f"the larger run must run more tasks: {tasks_small} and {tasks_large}")
    tasks = tasks_large - tasks_small
    result = {}
    for name, (bytecodes, calls) in large_counts.items():
        before = small_counts.get(name, [0, 0])
        more = [(bytecodes - before[0]) / tasks, (calls - before[1]) / tasks]
        if more[0] > 0 or more[1] > 0:
            result[name] = more
    return result


def by_file(counts: dict[str, list[float]]) -> list[tuple[str, float]]:
    """Bytecodes per task by module, most first."""
    files: collections.Counter[str] = collections.Counter()
    for name, (bytecodes, _) in counts.items():
        files[name.split(":", 1)[0]] += bytecodes
    return files.most_common()


def report(mode: str, sizes: tuple[int, int], counts: dict[str, list[float]], top: int,
           recorder: bool = False) -> str:
    total = sum(b for b, _ in counts.values())
    calls = sum(c for _, c in counts.values())
    mode = f"{mode} mode, flight recorder on" if recorder else f"{mode} mode"
    lines = [f"bytecodes per task, {mode} (runs of {sizes[1]} and {sizes[0]} messages): {total:,.0f}, "
             f"in {calls:.0f} Python calls", "  by module:"]
    lines += [f"    {bytecodes:8.1f}  {name}" for name, bytecodes in by_file(counts)[:top] if bytecodes >= 0.5]
    lines.append("  by function (its own bytecodes per task; calls per task):")
    ranked = sorted(counts.items(), key=lambda item: -item[1][0])[:top]
    lines += [f"    {bytecodes:8.1f}  {calls:6.2f}  {name}" for name, (bytecodes, calls) in ranked if bytecodes >= 0.5]
    return "\n".join(lines)


def _counted_run(spec: dict) -> int:
    """The child: one traced run of the echo workload, its counts written to ``spec["out"]``."""
    import persistent
    from workload import prefill

    from knarr.engine import event_loop

    async def run() -> tuple[int, Counter]:
        topic, ends = prefill(spec["bootstrap"], spec["messages"])
        counter = Counter()
        counter.install()
        try:
            figure, _, _ = await persistent.run_worker(spec["bootstrap"], spec["mode"], topic, ends,
                                                       spec["max_executors"], recorder=spec["recorder"])
        finally:
            counter.remove()
        return figure.count, counter

    tasks, counter = event_loop.run(run())  # the loop a worker runs on (uvloop by default)
    Path(spec["out"]).write_text(json.dumps({"tasks": tasks, "counts": counter.by_name()}))
    return 0


def count(mode: str, bootstrap: str, messages: int, max_executors: int,
          recorder: bool = False) -> tuple[int, dict[str, list[int]]]:
    """(tasks, counts) of one traced run in a process of its own."""
    # A file, not stdout: a line of counts runs past 64 KiB, and what the worker's threads print can cut into it.
    with tempfile.TemporaryDirectory(prefix="knarr-bytecodes-") as tmp:
        out = Path(tmp) / "counts.json"
        spec = json.dumps({"mode": mode, "bootstrap": bootstrap, "messages": messages, "max_executors": max_executors,
                           "recorder": recorder, "out": str(out)})
        proc = subprocess.run([sys.executable, __file__, "--counted", spec], capture_output=True, text=True,
                              timeout=1800)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"the traced {mode} run of {messages} messages failed (exit {proc.returncode}):\n"
                               f"{proc.stderr[-3000:]}")
        result = json.loads(out.read_text())
    return result["tasks"], result["counts"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=MODES, default="spawn")
    parser.add_argument("--messages", type=int, default=2_400, help="the larger run's messages")
    parser.add_argument("--base", type=int, default=400, help="the smaller run's messages (fewer than --messages)")
    parser.add_argument("--max-executors", type=int, default=4)
    parser.add_argument("--top", type=int, default=40, help="functions (and modules) listed")
    parser.add_argument("--recorder", action="store_true", help="count with the flight recorder on")
    parser.add_argument("--bootstrap", default="", help="Kafka bootstrap; default: start or reuse the local broker")
    parser.add_argument("--counted", help=argparse.SUPPRESS)  # the child: one traced run
    args = parser.parse_args()
    if args.counted:
        return _counted_run(json.loads(args.counted))
    if not 0 < args.base < args.messages:
        parser.error(f"--base must be at least 1 and fewer than --messages ({args.messages}), got {args.base}")
    if args.top < 1:
        parser.error(f"--top must be 1 or more, got {args.top}")
    from tests.services.kafka import ensure_kafka

    bootstrap = args.bootstrap or ensure_kafka()
    print(f"counting {args.mode} mode{', flight recorder on' if args.recorder else ''}: a traced run of "
          f"{args.base} messages, then one of {args.messages} ...", file=sys.stderr, flush=True)
    small = count(args.mode, bootstrap, args.base, args.max_executors, args.recorder)
    large = count(args.mode, bootstrap, args.messages, args.max_executors, args.recorder)
    print(report(args.mode, (args.base, args.messages), per_task(small, large), args.top, args.recorder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
