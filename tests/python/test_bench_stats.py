"""stats.py: medians, metrics by path, cell keys, ratios paired by repetition, their spread and the
verdict on a goal. Pure functions on hand-made rows."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from outboard.bench import stats


@dataclass
class FakeCase:
    """Unit-test fake of a case: only what a ratio reads."""

    name: str = "c"
    reference: str | None = "peer"
    ratio_metric: str | None = "t.p50"
    ours: str = "outboard"


def _row(impl: str, rep: int, value: float, size: int = 64, ok: bool = True, case: str = "c") -> dict:
    return {"case": case, "impl": impl, "params": {"size": size, "repeat": rep},
            "metrics": {"t": {"p50": value}}, "correctness": {"ok": ok}}


def test_median_of_odd_and_even_counts() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert stats.median([7.0]) == 7.0


def test_metrics_by_path_and_cells_without_the_repeat() -> None:
    metrics = {"t": {"p50": 2, "note": "x"}, "rate": 5.5, "ok": True}
    assert stats.get(metrics, "t.p50") == 2.0 and stats.get(metrics, "rate") == 5.5
    assert stats.get(metrics, "t.note") is None and stats.get(metrics, "ok") is None
    assert stats.get(metrics, "missing.p50") is None and stats.get(metrics, "rate.p50") is None
    assert stats.cell_key({"size": 64, "repeat": 2, "transport": "shm"}) == (("size", 64), ("transport", "shm"))


def test_ratio_is_the_median_of_per_repetition_ratios_with_their_spread() -> None:
    rows = [_row("outboard", 0, 1.0), _row("peer", 0, 1.0),  # 1.0
            _row("outboard", 1, 3.0), _row("peer", 1, 2.0),  # 1.5
            _row("outboard", 2, 1.2), _row("peer", 2, 1.0),  # 1.2
            _row("outboard", 3, 9.0)]  # no peer in repetition 3: not paired
    (r,) = stats.ratio_stats(rows, FakeCase()).values()
    assert (r.median, r.low, r.high, r.repetitions) == (pytest.approx(1.2), 1.0, 1.5, 3)
    assert stats.ratios(rows, FakeCase()) == {(("size", 64),): pytest.approx(1.2)}


def test_failed_rows_other_cases_and_missing_peers_give_no_ratio() -> None:
    rows = [_row("outboard", 0, 1.0, size=1), _row("peer", 0, 1.0, size=1, ok=False),
            _row("outboard", 0, 1.0, size=2), _row("peer", 0, 1.0, size=2, case="other"),
            _row("outboard", 0, 1.0, size=3)]
    assert stats.ratio_stats(rows, FakeCase()) == {}
    assert stats.ratio_stats(rows, FakeCase(reference=None)) == {}


def test_another_implementation_is_paired_with_the_same_reference() -> None:
    rows = [_row("outboard", 0, 2.0), _row("mine", 0, 3.0), _row("peer", 0, 1.0)]
    assert stats.ratios(rows, FakeCase(), "mine") == {(("size", 64),): 3.0}


@pytest.mark.parametrize("low, high, lower_is_better, goal, verdict", [
    (1.0, 1.2, True, 1.3, "met"), (1.4, 1.6, True, 1.3, "missed"), (1.2, 1.4, True, 1.3, "straddles"),
    (1.3, 1.3, True, 1.3, "met"),  # on the goal is meeting it
    (0.9, 1.1, False, 0.8, "met"), (0.5, 0.7, False, 0.8, "missed"), (0.65, 1.03, False, 0.8, "straddles"),
])
def test_goal_verdicts(low: float, high: float, lower_is_better: bool, goal: float, verdict: str) -> None:
    assert stats.Ratio((low + high) / 2, low, high, 3).verdict(goal, lower_is_better) == verdict


def test_measurements_in_an_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="'sleepy' is not one of slow, shared core"):
        stats.measurements_in([], "sleepy")
