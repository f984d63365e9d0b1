"""The benchmark harness: results schema, meta, interleaved repetitions, ratios, re-rendering.

The suites here are fakes (unit test only): their implementations return fixed measurements, so
the harness's bookkeeping can be checked exactly. Real suites are tested in test_bench_channel and
the others; the statistics alone in test_bench_stats.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest

from outboard.bench import harness, report, stats
from outboard.bench.declare import OURS, Case, Chart, Column, Goal, Impl, Measurement, Option, Options, Suite, numbers
from outboard.errors import BadConfig


def _fake_impl(name: str, base: float, ok: bool = True) -> Impl:
    calls = iter(range(1000))

    def measure(env, params):
        k = next(calls)
        return Measurement({"lat_us": {"p50": base * params["size"] + k % 2, "p99": 2 * base * params["size"]},
                            "rate": 1000.0 / base}, ok, {"seen": params["size"]})

    return Impl(name, measure)


FAKE_CASE = Case(
    "fake", "Fake case", sweep={"size": [1, 2, 4]}, quick={"size": [1, 2]},
    impls=[_fake_impl(OURS, 3.0), _fake_impl("peer", 2.0),
           Impl("absent", lambda env, p: Measurement({}, True), lambda env, p: "not installed here")],
    columns=[Column("p50", "lat_us.p50"), Column("p99", "lat_us.p99"), Column("rate", "rate")],
    reference="peer", ratio_metric="lat_us.p50")
FAKE_SUITE = Suite("fake", "Fake suite", [FAKE_CASE], [Chart("fake", "size", "lat_us.p50", "Fake latency", "µs")],
                   setup=lambda options: nullcontext(None))
#: The same without a reference: measured --repeat times, no more.
PLAIN_SUITE = dataclasses.replace(FAKE_SUITE, cases=[dataclasses.replace(FAKE_CASE, reference=None, ratio_metric=None)])


def _run(suite: Suite, options: Options) -> Path:
    """harness.run with a machine that never turns slow: a retaken measurement would call a fake
    once more and shift the values the assertions expect (the real probe did, failing CI)."""
    return harness.run(suite, options, harness.MachineWatch(lambda: 20.0))


@pytest.fixture
def fake_run(tmp_path: Path) -> Path:
    return _run(FAKE_SUITE, Options(out=str(tmp_path / "run"), repeat=2, progress=False))


def test_results_rows_follow_the_schema(fake_run: Path) -> None:
    rows = [json.loads(line) for line in (fake_run / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 3 * 2  # sizes x repeats (--repeat 2, at least 3 with a reference) x available impls
    for row in rows:
        assert set(row) == {"suite", "case", "impl", "params", "metrics", "correctness"}
        assert row["suite"] == "fake" and row["case"] == "fake"
        assert row["params"]["repeat"] in (0, 1, 2) and row["correctness"]["ok"] is True
        assert row["correctness"]["seen"] == row["params"]["size"]
    # Implementations interleave, the order rotating each repeat.
    assert [r["impl"] for r in rows[:6]] == [OURS, "peer", "peer", OURS, OURS, "peer"]


def test_meta_records_machine_run_and_skips(fake_run: Path) -> None:
    meta = json.loads((fake_run / "meta.json").read_text())
    for key in ("host", "cpu", "cores", "kernel", "transport", "git", "started", "load_before", "load_after",
                "core_to_core_before", "core_to_core_after", "command", "repeat"):
        assert key in meta, key
    if meta["core_to_core_before"]:  # two cores or more: the report says what a cache line took
        a, b = meta["core_to_core_before"]["cores"]
        assert f"a cache line from core {a} to core {b} in " in (fake_run / "report.md").read_text()
    assert meta["command"] == "outboard bench fake --repeat 2"
    assert meta["repeat"] == 2 and meta["ratio_repeats"] == harness.MIN_RATIO_REPEATS
    assert any("absent" in where and why == "not installed here" for where, why in meta["skipped"].items())


def test_ratio_is_the_median_of_ours_over_reference_per_repetition() -> None:
    def row(impl, size, rep, p50, ok=True):
        return {"case": "fake", "impl": impl, "params": {"size": size, "repeat": rep},
                "metrics": {"lat_us": {"p50": p50}}, "correctness": {"ok": ok}}

    rows = [row("outboard", 1, 0, 3.0), row("outboard", 1, 1, 5.0), row("outboard", 1, 2, 100.0),
            row("peer", 1, 0, 2.0), row("peer", 1, 1, 2.0),
            row("outboard", 2, 0, 6.0), row("peer", 2, 0, 1.0, ok=False),  # a failed check gives no ratio
            row("outboard", 4, 0, 8.0)]  # no peer measurement, no ratio
    # Paired by repeat (repeat 2 has no peer measurement): the median of 3 / 2 and 5 / 2, and its spread.
    assert stats.ratio_stats(rows, FAKE_CASE) == {(("size", 1),): stats.Ratio(2.0, 1.5, 2.5, 2)}
    assert stats.ratios(rows, FAKE_CASE) == {(("size", 1),): 2.0}


def test_a_second_implementation_gets_its_own_ratio_beside_the_goals(tmp_path: Path) -> None:
    case = Case("fake", "Fake", {"size": [1]},
                [_fake_impl(OURS, 3.0), _fake_impl("ours like peer", 4.0), _fake_impl("peer", 2.0)],
                [Column("p50", "lat_us.p50")], reference="peer", ratio_metric="lat_us.p50",
                ours="ours like peer", also_ratio=(OURS,))
    suite = Suite("fake", "Fake", [case], [], setup=lambda options: nullcontext(None))
    d = _run(suite, Options(out=str(tmp_path / "two"), progress=False))
    rows = [json.loads(line) for line in (d / "results.jsonl").read_text().splitlines()]
    # Three repetitions: ours like peer 4, 5, 4 over 2, 3, 2; outboard 3, 4, 3 over the same.
    assert stats.ratios(rows, case) == {(("size", 1),): pytest.approx(4.0 / 2.0)}
    assert stats.ratios(rows, case, OURS) == {(("size", 1),): pytest.approx(3.0 / 2.0)}
    text = (d / "report.md").read_text()
    assert ("| size | impl | p50 | check | ratio / peer (lower is better; median of the repetitions' ratios, in "
            "brackets their lowest and highest) |") in text
    assert "| 1 | ours like peer | 4.00 | ok | **2.00×** (1.67–2.00) |" in text  # the goal's ratio, bold
    assert "| 1 | outboard | 3.00 | ok | 1.50× (1.33–1.50) |" in text
    assert "| 1 | peer | 2.00 | ok |  |" in text


def test_report_has_tables_ratios_and_charts(fake_run: Path) -> None:
    text = (fake_run / "report.md").read_text()
    assert ("| size | impl | p50 | p99 | rate | check | outboard / peer (lower is better; median of the repetitions' "
            "ratios, in brackets their lowest and highest) |") in text
    assert "**1.50×** (1.33–1.50)" in text  # size 1: repeats 3 / 2, 4 / 3, 3 / 2
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
    d = _run(FAKE_SUITE, Options(quick=True, out=str(tmp_path / "q"), progress=False, cases=["fake"]))
    sizes = {json.loads(line)["params"]["size"] for line in (d / "results.jsonl").read_text().splitlines()}
    assert sizes == {1, 2}


def test_an_option_replaces_a_swept_parameters_values_and_is_in_the_command(tmp_path: Path) -> None:
    suite = dataclasses.replace(FAKE_SUITE, options=[Option("--sizes", "sizes", parse=numbers("--sizes", int, 1),
                                                            sweep="size")])
    d = _run(suite, Options(quick=True, out=str(tmp_path / "q"), progress=False, extra={"sizes": [8, 16]}))
    sizes = {json.loads(line)["params"]["size"] for line in (d / "results.jsonl").read_text().splitlines()}
    assert sizes == {8, 16}
    assert json.loads((d / "meta.json").read_text())["command"] == "outboard bench fake --quick --sizes 8,16"
    with pytest.raises(BadConfig, match=r"--sizes: '0,x' is not a comma-separated list of ints >= 1"):
        numbers("--sizes", int, 1)("0,x")


def test_a_failing_implementation_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    def broken(env, params):
        raise RuntimeError("peer crashed")

    case = Case("fake", "Fake", {"size": [1]}, [_fake_impl(OURS, 1.0), Impl("peer", broken)],
                [Column("p50", "lat_us.p50")], reference="peer", ratio_metric="lat_us.p50")
    suite = Suite("fake", "Fake", [case], [], setup=lambda options: nullcontext(None))
    d = _run(suite, Options(out=str(tmp_path / "f"), progress=False))
    meta = json.loads((d / "meta.json").read_text())
    assert list(meta["failed"].values()) == ["RuntimeError: peer crashed"]
    assert len((d / "results.jsonl").read_text().splitlines()) == harness.MIN_RATIO_REPEATS


def test_matplotlib_loads_only_when_charts_are_drawn() -> None:
    code = ("import sys, outboard, outboard.bench.harness, outboard.bench.report, outboard.bench.suites.channel; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_report_and_statistics_do_not_import_the_harness() -> None:
    """No import cycle: harness -> report -> stats and declare, never back."""
    code = ("import sys, outboard.bench.report, outboard.bench.stats; "
            "print(sorted(m for m in sys.modules if m.startswith('outboard.bench')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(["outboard.bench", "outboard.bench.declare", "outboard.bench.report",
                                      "outboard.bench.stats"])


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
    out = harness.run(PLAIN_SUITE, Options(out=str(tmp_path / "run"), repeat=1, progress=False), watch)
    assert clock.slept == [stats.SLOW_STATE_PROBE_S] * 2 and watch.waited_s == 2 * stats.SLOW_STATE_PROBE_S
    rows = _rows(out)
    before = [r["metrics"]["core_to_core_ns"] for r in rows]
    after = [r["metrics"]["core_to_core_after_ns"] for r in rows]
    assert before == [60.0, 24.0, 59.0, 61.0, 60.0, 60.0] and after == [60.0, 59.0, 61.0, 60.0, 60.0, 60.0]
    assert stats.measurements_in(rows, "slow") == []
    meta = json.loads((out / "meta.json").read_text())
    assert meta["slow_state_waited_s"] == 2.0 and meta["slow_state_retaken"] == 0
    report_md = (out / "report.md").read_text()
    assert "slow state" not in report_md
    # The fast probe is the shared-core placement: listed, not waited out or taken again.
    second = rows[1]
    assert stats.measurements_in(rows, "shared core") == [
        (second["case"], stats.cell_key(second["params"]), 0, second["impl"], 24.0)]
    assert "## Measured with both vCPUs on one physical core" in report_md and ": 24 ns" in report_md


def test_a_slow_state_that_lasts_is_waited_on_once_and_listed_in_the_report(tmp_path: Path) -> None:
    # Usual for the first 16 of 24 measurements (two probes each), then slow: the last cell's 8.
    probes = iter([60.0] * 32 + [300.0] * 100)
    clock = _FakeClock()
    watch = harness.MachineWatch(lambda: next(probes), clock.sleep, lambda: clock.now)
    out = harness.run(PLAIN_SUITE, Options(out=str(tmp_path / "run"), repeat=4, progress=False), watch)
    # One wait of SLOW_STATE_WAIT_S, then measurements run without waiting while the state lasts.
    assert watch.waited_s == pytest.approx(stats.SLOW_STATE_WAIT_S, abs=stats.SLOW_STATE_PROBE_S)
    assert watch.retaken == 0  # it was slow before them too
    rows = _rows(out)
    slow = stats.measurements_in(rows, "slow")
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
    impl = Impl(OURS, lambda env, p: calls.append(p["size"]) or Measurement({"lat_us": 1.0}, True))
    case = Case("one", "One", sweep={"size": [1, 2]}, impls=[impl], columns=[Column("lat", "lat_us")])
    out = harness.run(Suite("one", "One", [case], [], setup=lambda options: nullcontext(None)),
                      Options(out=str(tmp_path / "run"), progress=False), watch)
    assert calls == [1, 1, 2] and watch.retaken == 1 and clock.slept == [stats.SLOW_STATE_PROBE_S]
    rows = _rows(out)
    assert [(r["metrics"]["core_to_core_ns"], r["metrics"]["core_to_core_after_ns"]) for r in rows] == [
        (60.0, 60.0), (60.0, 60.0)]
    assert json.loads((out / "meta.json").read_text())["slow_state_retaken"] == 1


def test_without_a_second_core_nothing_is_probed_or_waited(tmp_path: Path) -> None:
    clock = _FakeClock()
    watch = harness.MachineWatch(lambda: None, clock.sleep, lambda: clock.now)
    out = harness.run(PLAIN_SUITE, Options(out=str(tmp_path / "run"), repeat=1, progress=False), watch)
    rows = _rows(out)
    assert clock.slept == [] and all("core_to_core" not in str(r["metrics"]) for r in rows)


def _recording_suite(log: list[tuple[str, int]]) -> Suite:
    """A fake suite whose implementations log (impl, size) as they are measured: one case with a
    reference (ratio rows), one without."""

    def impl(name: str) -> Impl:
        return Impl(name, lambda env, p: log.append((name, p["size"])) or Measurement({"lat_us": 1.0}, True))

    ratio = Case("ratio", "Ratio", {"size": [1, 2, 3]}, [impl("A"), impl("B")], [Column("lat", "lat_us")],
                 quick={"size": [1, 2]}, reference="B", ratio_metric="lat_us", ours="A")
    plain = Case("plain", "Plain", {"size": [7]}, [impl("C")], [Column("lat", "lat_us")])
    return Suite("fake", "Fake", [ratio, plain], [], setup=lambda options: nullcontext(None))


def test_quick_ratio_rows_are_measured_three_times_interleaved_with_their_peer(tmp_path: Path) -> None:
    log: list[tuple[str, int]] = []
    d = _run(_recording_suite(log), Options(quick=True, out=str(tmp_path / "q"), progress=False))
    # Every repetition of a cell back to back, ours and the peer alternating (A B, B A, A B).
    assert log == [("A", 1), ("B", 1), ("B", 1), ("A", 1), ("A", 1), ("B", 1),
                   ("A", 2), ("B", 2), ("B", 2), ("A", 2), ("A", 2), ("B", 2),
                   ("C", 7)]  # without a reference: --repeat times, once
    rows = _rows(d)
    assert [r["params"]["repeat"] for r in rows if r["case"] == "ratio" and r["impl"] == "A"] == [0, 1, 2] * 2
    assert all(r.repetitions == 3 for r in stats.ratio_stats(rows, _recording_suite([]).cases[0]).values())


def test_more_repeats_than_the_minimum_are_honoured(tmp_path: Path) -> None:
    log: list[tuple[str, int]] = []
    _run(_recording_suite(log), Options(quick=True, out=str(tmp_path / "r"), repeat=5, progress=False,
                                               cases=["ratio"]))
    assert log.count(("A", 1)) == log.count(("B", 1)) == 5 and ("C", 7) not in log


def test_a_smoke_run_measures_each_cell_once_waits_for_nothing_and_judges_no_goal(tmp_path: Path) -> None:
    log: list[tuple[str, int]] = []
    probes: list[None] = []
    suite = _recording_suite(log)
    suite = dataclasses.replace(suite, cases=[dataclasses.replace(suite.cases[0], goal=Goal(2.0)), suite.cases[1]])
    parser = argparse.ArgumentParser()
    suite.add_arguments(parser)
    options = suite.parse(parser.parse_args(["--smoke", "--out", str(tmp_path / "s"), "--no-progress"]))
    assert options.quick and options.smoke
    # A watch that would wait every time: a smoke run must not consult it.
    d = harness.run(suite, options, harness.MachineWatch(lambda: probes.append(None) or 1e9))
    assert log == [("A", 1), ("B", 1), ("A", 2), ("B", 2), ("C", 7)] and probes == []
    meta = json.loads((d / "meta.json").read_text())
    assert meta["smoke"] is True and meta["ratio_repeats"] == 1 and meta["command"] == "outboard bench fake --smoke"
    text = (d / "report.md").read_text()
    assert text.startswith(f"# Fake\n\n{report.SMOKE_NOTE}\n") and "| 1 | A | 1.00 | ok | **1.00×** |" in text
    assert not any(mark in text for mark in report.GOAL_MARKS.values())


def test_the_report_marks_a_goal_the_repetitions_straddle(tmp_path: Path) -> None:
    # size 1: ours 3, 4, 3 over the peer's 2, 3, 2 = 1.5, 1.33, 1.5; size 2: 7, 6, 7 over 5, 4, 5 = 1.4, 1.5, 1.4.
    case = dataclasses.replace(FAKE_CASE, goal=Goal(1.45, {"size": 2}), impls=FAKE_CASE.impls[:2],
                               quick={"size": [1, 2]})
    suite = dataclasses.replace(FAKE_SUITE, cases=[case], charts=[])
    text = (_run(suite, Options(quick=True, out=str(tmp_path / "g"), progress=False)) / "report.md").read_text()
    assert "| 2 | outboard | 7.00 | 12.00 | 333.33 | ok | **1.40×** (1.40–1.50) **straddles** goal ≤ 1.45× |" in text
    assert "| 1 | outboard | 3.00 | 6.00 | 333.33 | ok | **1.50×** (1.33–1.50) |" in text  # the goal is not size 1's
    for goal, mark in ((1.6, "meets goal ≤ 1.6×"), (1.2, "**misses** goal ≤ 1.2×")):
        again = dataclasses.replace(suite, cases=[dataclasses.replace(case, goal=Goal(goal, {"size": 2}))])
        rendered = report.render(again, *report.load(tmp_path / "g"), None)
        assert f"**1.40×** (1.40–1.50) {mark} |" in rendered


def test_a_suite_with_a_body_of_its_own_gets_the_same_run_directory_and_report(tmp_path: Path, capsys) -> None:
    def body(run: harness.Run, env: object) -> None:
        run.progress.expect(2)
        for k in range(2):
            run.results.add("own", "outboard", {"k": k}, {"n": k}, {"ok": True})
            run.progress.step(f"k {k}")
        run.results.meta["own"] = "yes"

    suite = Suite("own", "Own", body=body, render=lambda rows, meta, d: f"# Own\n\n{len(rows)} rows, own {meta['own']}",
                  brief=lambda rows, meta: f"own brief: {len(rows)} rows")
    d = _run(suite, Options(out=str(tmp_path / "own"), progress=False))
    assert [r["params"]["k"] for r in _rows(d)] == [0, 1]
    assert (d / "report.md").read_text() == "# Own\n\n2 rows, own yes\n"
    out = capsys.readouterr().out
    assert "own brief: 2 rows" in out and f"report: {d}/report.md" in out and "# Own" not in out
