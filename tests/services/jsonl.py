"""JSON lines that another process appends to while a test reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def written_lines(path: Path) -> list[Any]:
    """Each complete line of ``path`` as JSON; [] if it does not exist yet. A last line without its
    newline is one the writer has not finished (a long line takes it several writes): the next look
    has it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.rpartition("\n")[0].splitlines() if line.strip()]
