"""The benchmark harness: results schema, meta, ratios, re-rendering and comparison.

The suite here is a fake (unit test only): its implementations return fixed measurements, so
the harness's bookkeeping can be checked exactly. Real suites are tested in test_bench_channel.
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest

from outboard.bench import harness, report
from outboard.bench.harness import Case, Chart, Column, Impl, Measurement, Options, Suite


def _fake_impl(name: str, base: float, ok: bool = True) -> Impl:
    calls = iter(range(1000))

    def measure(env, params):
        k = next(calls)
        return Measurement({"lat_us": {"p50": base * params["size"] + k % 2, "p99": 2 * base * params["size"]},
                            "rate": 1000.0 / base}, ok, {"seen": params["size"]})

    return Impl(name, measure)


FAKE_CASE = Case(
    "fake", "Fake case", sweep={"size": [1, 2, 4]}, quick={"size": [1, 2]},
    impls=[_fake_impl(harness.OURS, 3.0), _fake_impl("peer", 2.0),
           Impl("absent", lambda env, p: Measurement({}, True), lambda env, p: "not installed here")],
    columns=[Column("p50", "lat_us.p50"), Column("p99", "lat_us.p99"), Column("rate", "rate")],
    reference="peer", ratio_metric="lat_us.p50")
FAKE_SUITE = Suite("fake", "Fake suite", [FAKE_CASE], [Chart("fake", "size", "lat_us.p50", "Fake latency", "µs")],
                   setup=lambda options: nullcontext(None))


@pytest.fixture
def fake_run(tmp_path: Path) -> Path:
    return harness.run(FAKE_SUITE, Options(out=str(tmp_path / "run"), repeat=2, progress=False))


def test_results_rows_follow_the_schema(fake_run: Path) -> None:
    rows = [json.loads(line) for line in (fake_run / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 2 * 2  # sizes x repeats x available impls
    for row in rows:
        assert set(row) == {"suite", "case", "impl", "params", "metrics", "correctness"}
        assert row["suite"] == "fake" and row["case"] == "fake"
        assert row["params"]["repeat"] in (0, 1) and row["correctness"]["ok"] is True
        assert row["correctness"]["seen"] == row["params"]["size"]
    # Implementations interleave, the order rotating each repeat.
    assert [r["impl"] for r in rows[:4]] == [harness.OURS, "peer", "peer", harness.OURS]


def test_meta_records_machine_run_and_skips(fake_run: Path) -> None:
    meta = json.loads((fake_run / "meta.json").read_text())
    for key in ("host", "cpu", "cores", "kernel", "transport", "git", "started", "load_before", "load_after",
                "core_to_core_before", "core_to_core_after", "command", "repeat"):
        assert key in meta, key
    if meta["core_to_core_before"]:  # two cores or more: the report says what a cache line took
        a, b = meta["core_to_core_before"]["cores"]
        assert f"a cache line from core {a} to core {b} in " in (fake_run / "report.md").read_text()
    assert meta["command"] == "outboard bench fake --repeat 2"
    assert any("absent" in where and why == "not installed here" for where, why in meta["skipped"].items())


def test_ratio_is_ours_over_reference_of_medians_per_cell() -> None:
    def row(impl, size, rep, p50, ok=True):
        return {"case": "fake", "impl": impl, "params": {"size": size, "repeat": rep},
                "metrics": {"lat_us": {"p50": p50}}, "correctness": {"ok": ok}}

    rows = [row("outboard", 1, 0, 3.0), row("outboard", 1, 1, 5.0), row("outboard", 1, 2, 100.0),
            row("peer", 1, 0, 2.0), row("peer", 1, 1, 2.0),
            row("outboard", 2, 0, 6.0), row("peer", 2, 0, 1.0, ok=False),  # a failed check gives no ratio
            row("outboard", 4, 0, 8.0)]  # no peer measurement, no ratio
    r = harness.ratios(rows, FAKE_CASE)
    assert r == {(("size", 1),): pytest.approx(5.0 / 2.0)}
    # Paired by repeat (repeat 2 has no peer measurement): the run's own noise band around the ratio.
    assert harness.ratio_spread(rows, FAKE_CASE) == {(("size", 1),): (pytest.approx(1.5), pytest.approx(2.5))}


def test_a_second_implementation_gets_its_own_ratio_beside_the_goals(tmp_path: Path) -> None:
    case = Case("fake", "Fake", {"size": [1]},
                [_fake_impl(harness.OURS, 3.0), _fake_impl("ours like peer", 4.0), _fake_impl("peer", 2.0)],
                [Column("p50", "lat_us.p50")], reference="peer", ratio_metric="lat_us.p50",
                ours="ours like peer", also_ratio=(harness.OURS,))
    suite = Suite("fake", "Fake", [case], [], setup=lambda options: nullcontext(None))
    d = harness.run(suite, Options(out=str(tmp_path / "two"), progress=False))
    rows = [json.loads(line) for line in (d / "results.jsonl").read_text().splitlines()]
    assert harness.ratios(rows, case) == {(("size", 1),): pytest.approx(4.0 / 2.0)}
    assert harness.ratios(rows, case, harness.OURS) == {(("size", 1),): pytest.approx(3.0 / 2.0)}
    text = (d / "report.md").read_text()
    assert "| size | impl | p50 | check | ratio / peer (lower is better) |" in text
    assert "| 1 | ours like peer | 4.00 | ok | **2.00×** |" in text  # the goal's ratio, bold
    assert "| 1 | outboard | 3.00 | ok | 1.50× |" in text
    assert "| 1 | peer | 2.00 | ok |  |" in text


def test_report_has_tables_ratios_and_charts(fake_run: Path) -> None:
    text = (fake_run / "report.md").read_text()
    assert ("| size | impl | p50 | p99 | rate | check | outboard / peer (lower is better; in brackets, its lowest "
            "and highest in one repeat) |") in text
    assert "**1.40×** (1.33–1.50)" in text  # size 1: median(3, 4) / median(2, 3); repeats 3 / 2 and 4 / 3
    assert "absent" in text and "not installed here" in text  # skipped, with the reason
    assert "![Fake latency](charts/fake-lat_us-p50.png)" in text
    assert (fake_run / "charts" / "fake-lat_us-p50.png").stat().st_size > 1000
    assert "Reproduce: `outboard bench fake --repeat 2`" in text


def test_re_render_reproduces_the_report(fake_run: Path) -> None:
    before = (fake_run / "report.md").read_text()
    (fake_run / "report.md").unlink()
    for png in (fake_run / "charts").iterdir():
        png.unlink()
    report.write(fake_run, FAKE_SUITE)
    assert (fake_run / "report.md").read_text() == before
    assert (fake_run / "charts" / "fake-lat_us-p50.png").exists()


def test_report_of_a_directory_without_results_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a benchmark run directory"):
        report.load(tmp_path)


def test_quick_sweep_and_case_filter(tmp_path: Path) -> None:
    d = harness.run(FAKE_SUITE, Options(quick=True, out=str(tmp_path / "q"), progress=False, cases=["fake"]))
    sizes = {json.loads(line)["params"]["size"] for line in (d / "results.jsonl").read_text().splitlines()}
    assert sizes == {1, 2}


def test_a_failing_implementation_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    def broken(env, params):
        raise RuntimeError("peer crashed")

    case = Case("fake", "Fake", {"size": [1]}, [_fake_impl(harness.OURS, 1.0), Impl("peer", broken)],
                [Column("p50", "lat_us.p50")], reference="peer", ratio_metric="lat_us.p50")
    suite = Suite("fake", "Fake", [case], [], setup=lambda options: nullcontext(None))
    d = harness.run(suite, Options(out=str(tmp_path / "f"), progress=False))
    meta = json.loads((d / "meta.json").read_text())
    assert list(meta["failed"].values()) == ["RuntimeError: peer crashed"]
    assert len((d / "results.jsonl").read_text().splitlines()) == 1


def test_matplotlib_loads_only_when_charts_are_drawn() -> None:
    code = ("import sys, outboard, outboard.bench.harness, outboard.bench.report, outboard.bench.channel; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _FakeClock:
    """Unit-test fake: time that only the fake sleep moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_a_slow_state_is_waited_out_before_a_measurement_and_recorded(tmp_path: Path) -> None:
    # Probes (ns) before and after each of the 6 measurements: usual, a rare fast one (which must not
    # make the usual ones look slow), usual, then slow before the fourth, usual after two waits.
    probes = iter([60.0, 60.0, 24.0, 59.0, 59.0, 61.0, 290.0, 280.0, 61.0, 60.0] + [60.0] * 20)
    clock = _FakeClock()
    watch = harness.MachineWatch(lambda: next(probes), clock.sleep, lambda: clock.now)
    out = harness.run(FAKE_SUITE, Options(out=str(tmp_path / "run"), repeat=1, progress=False), watch)
    assert clock.slept == [harness.SLOW_STATE_PROBE_S] * 2 and watch.waited_s == 2 * harness.SLOW_STATE_PROBE_S
    rows = _rows(out)
    before = [r["metrics"]["core_to_core_ns"] for r in rows]
    after = [r["metrics"]["core_to_core_after_ns"] for r in rows]
    assert before == [60.0, 24.0, 59.0, 61.0, 60.0, 60.0] and after == [60.0, 59.0, 61.0, 60.0, 60.0, 60.0]
    assert harness.measurements_in(rows, "slow") == []
    meta = json.loads((out / "meta.json").read_text())
    assert meta["slow_state_waited_s"] == 2.0 and meta["slow_state_retaken"] == 0
    report_md = (out / "report.md").read_text()
    assert "slow state" not in report_md
    # The fast probe is the shared-core placement: listed, not waited out or taken again.
    second = rows[1]
    assert harness.measurements_in(rows, "shared core") == [
        (second["case"], harness.cell_key(second["params"]), 0, second["impl"], 24.0)]
    assert "## Measured with both vCPUs on one physical core" in report_md and ": 24 ns" in report_md


def test_a_slow_state_that_lasts_is_waited_on_once_and_listed_in_the_report(tmp_path: Path) -> None:
    # Usual for the first 16 of 24 measurements (two probes each), then slow: the last cell's 8.
    probes = iter([60.0] * 32 + [300.0] * 100)
    clock = _FakeClock()
    watch = harness.MachineWatch(lambda: next(probes), clock.sleep, lambda: clock.now)
    out = harness.run(FAKE_SUITE, Options(out=str(tmp_path / "run"), repeat=4, progress=False), watch)
    # One wait of SLOW_STATE_WAIT_S, then measurements run without waiting while the state lasts.
    assert watch.waited_s == pytest.approx(harness.SLOW_STATE_WAIT_S, abs=harness.SLOW_STATE_PROBE_S)
    assert watch.retaken == 0  # it was slow before them too
    rows = _rows(out)
    slow = harness.measurements_in(rows, "slow")
    assert len(slow) == 8 and {key for _, key, *_ in slow} == {(('size', 4),)} and all(ns == 300.0 for *_, ns in slow)
    report_md = (out / "report.md").read_text()
    assert "## Measured in the VM's slow state" in report_md
    assert "fake size=4, repeat 3, outboard: 300 ns" in report_md and "fake size=4, repeat 3, peer: 300 ns" in report_md


def test_a_measurement_the_slow_state_came_during_is_taken_again_once_it_passed(tmp_path: Path) -> None:
    # The first measurement ends in the slow state; the watch waits it out and measures again.
    probes = iter([60.0, 290.0, 290.0, 60.0, 60.0] + [60.0] * 20)
    clock = _FakeClock()
    watch = harness.MachineWatch(lambda: next(probes), clock.sleep, lambda: clock.now)
    calls = []
    impl = Impl(harness.OURS, lambda env, p: calls.append(p["size"]) or Measurement({"lat_us": 1.0}, True))
    case = Case("one", "One", sweep={"size": [1, 2]}, impls=[impl], columns=[Column("lat", "lat_us")])
    out = harness.run(Suite("one", "One", [case], [], setup=lambda options: nullcontext(None)),
                      Options(out=str(tmp_path / "run"), progress=False), watch)
    assert calls == [1, 1, 2] and watch.retaken == 1 and clock.slept == [harness.SLOW_STATE_PROBE_S]
    rows = _rows(out)
    assert [(r["metrics"]["core_to_core_ns"], r["metrics"]["core_to_core_after_ns"]) for r in rows] == [
        (60.0, 60.0), (60.0, 60.0)]
    assert json.loads((out / "meta.json").read_text())["slow_state_retaken"] == 1


def test_without_a_second_core_nothing_is_probed_or_waited(tmp_path: Path) -> None:
    clock = _FakeClock()
    watch = harness.MachineWatch(lambda: None, clock.sleep, lambda: clock.now)
    out = harness.run(FAKE_SUITE, Options(out=str(tmp_path / "run"), repeat=1, progress=False), watch)
    rows = _rows(out)
    assert clock.slept == [] and all("core_to_core" not in str(r["metrics"]) for r in rows)
