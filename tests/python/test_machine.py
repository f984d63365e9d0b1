"""Machine facts recorded beside every benchmark figure: the core-to-core probe."""

from __future__ import annotations

import os

import pytest

from outboard import _bench, errors, machine

needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")


@needs_two_cores
def test_core_to_core_times_each_batch_and_leaves_the_callers_affinity_alone() -> None:
    before = os.sched_getaffinity(0)
    a, b = sorted(before)[:2]
    ns = _bench.bench_core_to_core(a, b, 5, 200, 5.0)
    assert len(ns) == 5 and all(0 < v < 1e6 for v in ns)
    assert os.sched_getaffinity(0) == before  # the processes a suite starts inherit it
    probe = machine.core_to_core()
    assert probe is not None and probe["cores"] == [a, b]
    assert 0 < probe["min_ns"] <= probe["p50_ns"] <= probe["max_ns"]


def test_core_to_core_on_a_core_that_does_not_exist_names_it() -> None:
    missing = max(os.sched_getaffinity(0)) + 4096
    with pytest.raises(errors.BadConfig, match=str(missing)):
        _bench.bench_core_to_core(0, missing, 1, 10, 5.0)


def test_core_to_core_needs_a_round_trip() -> None:
    with pytest.raises(errors.InvalidArgument, match="at least one batch"):
        _bench.bench_core_to_core(0, 0, 0, 10, 5.0)
