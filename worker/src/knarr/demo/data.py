"""Demo input: a small text corpus and a JSONL file of search requests (deterministic)."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("kafka", "window", "task", "group", "watermark", "sink", "partition", "offset", "replay", "commit",
         "spark", "backfill", "operator", "pipeline", "subprocess", "grep", "harbor", "longship", "oar", "sail")
PATTERNS = ("kafka", "watermark", "sail", "oar", "commit", "partition", "backfill", "nothing-matches-this")


def write_corpus(directory: Path, files: int = 6, lines: int = 400, seed: int = 7) -> list[Path]:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        path = directory / f"saga-{i}.txt"
        path.write_text("\n".join(" ".join(rng.choices(WORDS, k=8)) for _ in range(lines)) + "\n")
        paths.append(path)
    return paths


def write_requests(path: Path, corpus: list[Path], count: int = 40, seed: int = 11) -> int:
    rng = random.Random(seed)
    with path.open("w") as fh:
        for i in range(count):
            req = {
                "request_id": f"req-{i:04d}",
                "patterns": rng.sample(PATTERNS, k=rng.randint(1, 3)),
                "file_paths": [str(p) for p in rng.sample(corpus, k=rng.randint(1, 3))],
            }
            fh.write(json.dumps(req) + "\n")
        fh.write("this line is not JSON: it shows that bad input is reported, not lost or stuck\n")
    return count + 1
