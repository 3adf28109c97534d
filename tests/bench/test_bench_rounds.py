"""The benches' verdicts from rounds (bench/rounds.py): a median, and where it lies with 95 % confidence."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from rounds import host_pace, judged, median_interval, nearest_median, pace_text, places  # noqa: E402


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


def test_the_hosts_pace_is_sampled_as_often_as_asked_and_reported_as_its_range_and_median():
    paces = host_pace(samples=3)
    assert len(paces) == 3 and all(0 < pace < 10_000 for pace in paces)  # ns per iteration of a plain loop
    assert pace_text([70.2, 121.0, 95.4]) == "a plain Python loop 70-121 ns per iteration (median 95 of 3 samples)"


def test_a_figure_beside_its_verdict_never_reads_as_the_target_it_misses():
    assert places(5.04, 5.0, 1) == 2  # "+5.0 %" beside a MISS of <= 5 % would read as met
    assert places(0.897, 0.9, 2) == 3 and places(150.4, 150, 0) == 1
    assert places(4.7, 10, 1) == 1 and places(5.0, 5.0, 1) == 1  # far from it, or the target itself
    assert places(5.000001, 5.0, 1) == 4  # at most four places


def test_a_median_that_rounds_to_the_target_is_printed_with_the_places_that_show_its_miss(capsys):
    judged("ratio", [0.896, 0.897, 0.95], 0.9, 2, "", "0.9")
    median_line, rounds_line = capsys.readouterr().out.splitlines()
    assert "0.897" in median_line and median_line.endswith("MISS")
    assert "0.90, 0.90, 0.95" in rounds_line  # the rounds keep their places


def test_the_recorders_cost_just_over_its_target_reads_as_over_it_beside_its_miss():
    from recorder import RecorderOverhead, Run

    off, on = Run(1000, 1.0, 0.1, recorder=False), Run(1000, 1 / 0.9496, 0.12, events=6000, recorder=True)
    report = RecorderOverhead(messages=1000, runs=[off, on]).report()
    cost_line = next(line for line in report.splitlines() if line.lstrip().startswith("cost:"))
    assert "cost: +5.04 % throughput" in cost_line and cost_line.endswith("MISS")
