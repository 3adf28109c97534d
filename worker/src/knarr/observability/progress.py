"""A progress bar on the terminal (tqdm) for runs over a finite input, and nothing elsewhere.

The bar is drawn on stderr only when stderr is a terminal: in a pod, a CI log or a pipe it
would be noise. While it is shown, everything else written to stderr (the worker's log
lines) is printed above it instead of through it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from tqdm import tqdm


def wanted(stream: TextIO | None = None, enabled: bool = True) -> bool:
    stream = sys.stderr if stream is None else stream
    return enabled and hasattr(stream, "isatty") and stream.isatty()


class _AboveTheBar:
    """A stand-in for stderr that clears the bar, writes whole lines, and redraws the bar."""

    def __init__(self, real: TextIO) -> None:
        self._real = real
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        done, newline, self._pending = self._pending.rpartition("\n")
        if newline:
            with tqdm.external_write_mode(file=self._real):
                self._real.write(done + newline)
                self._real.flush()
        return len(text)

    def flush(self) -> None:
        self._real.flush()

    def finish(self) -> None:
        """Write what is left of an unfinished line."""
        if self._pending:
            self._real.write(self._pending)
            self._pending = ""

    def isatty(self) -> bool:
        return self._real.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _width(stream: TextIO) -> dict[str, Any]:
    """Follow the terminal's width; a terminal that reports none (a bare pty) gets 80 columns."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 0
    return {"dynamic_ncols": True} if columns else {"ncols": 80, "nrows": 24}


@contextlib.contextmanager
def progress_bar(description: str, unit: str, enabled: bool = True) -> Iterator[tqdm | None]:
    """A tqdm bar on stderr (None when not on a terminal); stderr writes go above it meanwhile."""
    real = sys.stderr
    if not wanted(real, enabled):
        yield None
        return
    bar = tqdm(total=None, desc=description, unit=unit, file=real, leave=True, **_width(real),
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}]{postfix}")
    above = _AboveTheBar(real)
    sys.stderr = above  # type: ignore[assignment]
    try:
        yield bar
    finally:
        sys.stderr = real
        bar.close()
        above.finish()
