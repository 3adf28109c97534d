"""A bench's figures as data: what it printed, written as JSON when asked (``--json PATH``).

A bench's table is for people, laid out in columns; a test or a script that wants its figures reads
this file instead of the columns, which a slow machine's wide figures can shift.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the figures the table shows to PATH, as JSON")


def _plain(value: object) -> object:
    """JSON has no NaN or infinity: a figure that is not a number is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def write(path: Path | None, figures: dict) -> None:
    """``figures`` to ``path`` (nothing without one)."""
    if path is not None:
        path.write_text(json.dumps(_plain(figures), indent=1) + "\n")
