"""The benches' verdicts from rounds (bench/rounds.py): a median, and where it lies with 95 % confidence."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from rounds import median_interval, nearest_median  # noqa: E402


def test_the_interval_holds_the_median_and_lies_within_the_rounds():
    ratios = [0.84, 0.91, 0.87, 0.89, 0.86]
    low, high = median_interval(ratios)
    assert min(ratios) <= low <= statistics.median(ratios) <= high <= max(ratios)


def test_the_interval_narrows_to_a_point_when_every_round_agrees_and_is_repeatable():
    assert median_interval([9.5, 9.5, 9.5]) == (9.5, 9.5)
    spread = [6.2, 10.7, 8.2, 8.6]
    assert median_interval(spread) == median_interval(spread)


def test_one_round_is_its_own_interval():
    assert median_interval([0.87]) == (0.87, 0.87)


def test_the_round_shown_in_detail_is_the_one_nearest_the_median():
    assert nearest_median([0.80, 0.95, 0.88, 0.85, 0.90]) == 2  # the median itself
    assert nearest_median([12.0]) == 0
