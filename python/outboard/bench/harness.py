"""The harness behind ``outboard bench <suite>``.

A suite is declarative: cases, each a parameter sweep (a smaller one for ``--quick``), the
implementations compared — ours and its peers — with the peer that ratios are taken against, the
table columns and the charts. The harness runs every cell for every implementation, interleaved
(the order rotates on each ``--repeat``), writes one row per measurement to results.jsonl, the
machine and run context to meta.json, and renders report.md with charts (see report.py).
"""

from __future__ import annotations

import itertools
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .output import Results, run_dir

#: The implementation that is ours in every suite; ratios are ours / peer.
OURS = "outboard"
#: Before and after each measurement (one implementation in one cell) the harness times a cache line
#: between two cores. On these VMs that time has a usual value (~60 ns), a rare faster one and a slow
#: state (~280 ns, the host having placed the vCPUs apart) that moves every figure between threads
#: and processes. Above this many times the run's median probe the harness waits for it to pass,
#: probing every SLOW_STATE_PROBE_S for at most SLOW_STATE_WAIT_S, and does not wait again until a
#: probe finds it gone (a state that lasts is recorded, not waited out per measurement). A
#: measurement that began in the usual state and ended in the slow one is taken again, once.
SLOW_STATE_FACTOR = 2.0
SLOW_STATE_WAIT_S = 20.0
SLOW_STATE_PROBE_S = 1.0
#: Below the run's median probe divided by this, the host runs both vCPUs on one physical core (SMT
#: siblings, a line in ~20 ns): nothing is waited out or taken again, the report lists them.
SHARED_CORE_FACTOR = 2.0
#: The states the report lists measurements of, apart from the usual one.
UNUSUAL_STATES = ("slow", "shared core")


@dataclass(frozen=True)
class Measurement:
    """What one implementation measured in one cell. Metrics are numbers or order statistics
    ({"p50": .., "p90": .., ...}); their unit is part of the name (``one_way_us``, ``mib_s``).
    ``ok`` is the correctness check on the very data that was timed. ``series``: raw data a chart
    draws from (a timeline), kept in the row so that ``outboard report`` can redraw it."""

    metrics: dict[str, Any]
    ok: bool
    correctness: dict[str, Any] = field(default_factory=dict)
    series: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Impl:
    name: str
    measure: Callable[[Any, dict[str, Any]], Measurement]
    #: Why it cannot run here (peer missing, not root, ...), or None.
    unavailable: Callable[[Any, dict[str, Any]], str | None] = lambda env, params: None


@dataclass(frozen=True)
class Column:
    label: str
    metric: str  # "name" or "name.stat"
    digits: int = 2


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    sweep: Mapping[str, Sequence[Any]]
    impls: Sequence[Impl]
    columns: Sequence[Column]
    quick: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    #: Ratios ours / reference of this metric, per cell, from the same run.
    reference: str | None = None
    ratio_metric: str | None = None
    lower_is_better: bool = True
    #: The implementation whose ratio to the reference the case reports (the goal's ratio).
    ours: str = OURS
    #: Other implementations whose ratio to the reference is shown beside it.
    also_ratio: Sequence[str] = ()
    notes: str = ""

    def cells(self, quick: bool) -> list[dict[str, Any]]:
        sweep = {**self.sweep, **(self.quick if quick else {})}
        keys = list(sweep)
        return [dict(zip(keys, values)) for values in itertools.product(*(sweep[k] for k in keys))]


@dataclass(frozen=True)
class Chart:
    case: str
    x: str  # a swept parameter
    metric: str
    title: str
    ylabel: str
    logx: bool = True
    logy: bool = False
    #: Other parameters that split the lines (one line per impl and value).
    split: Sequence[str] = ()
    #: "line" (metric against x), or "timeline": the spans in a row's series["timeline"] as bars.
    kind: str = "line"


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    cases: Sequence[Case]
    charts: Sequence[Chart]
    #: Opens what the measurements need (agents, peers); yields the env passed to Impl.measure.
    setup: Callable[[Any], AbstractContextManager[Any]]
    #: Extra meta.json entries from the env after the run (transports in use, versions).
    describe: Callable[[Any], dict[str, Any]] = lambda env: {}
    notes: str = ""


@dataclass
class Options:
    quick: bool = False
    out: str | None = None
    agent: str | None = None
    repeat: int = 1
    log_level: str = "warning"
    progress: bool = True
    cases: Sequence[str] = ()


def get(metrics: Mapping[str, Any], path: str) -> float | None:
    """A metric by "name" or "name.stat"; None when the implementation did not report it."""
    name, _, stat = path.partition(".")
    value = metrics.get(name)
    if stat:
        value = value.get(stat) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


#: A cell: its swept parameters, sorted, without the repeat.
Cell = tuple[tuple[str, Any], ...]


def cell_key(params: Mapping[str, Any]) -> Cell:
    return tuple(sorted((k, v) for k, v in params.items() if k != "repeat"))


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _paired(rows: Sequence[Mapping[str, Any]], case: Case,
            impl: str | None) -> Iterator[tuple[Cell, dict[int, list[float]], dict[int, list[float]]]]:
    """Per cell that both `impl` (default: the case's ours) and the reference measured, from rows
    that passed their check: each side's ratio-metric values by repeat."""
    if not case.reference or not case.ratio_metric:
        return
    by: dict[tuple[str, Cell], dict[int, list[float]]] = {}
    for r in rows:
        if r["case"] != case.name or not r["correctness"].get("ok", False):
            continue
        v = get(r["metrics"], case.ratio_metric)
        if v is not None:
            repeats = by.setdefault((r["impl"], cell_key(r["params"])), {})
            repeats.setdefault(int(r["params"].get("repeat", 0)), []).append(v)
    for (name, key), ours in by.items():
        if name == (impl or case.ours) and (case.reference, key) in by:
            yield key, ours, by[(case.reference, key)]


def ratios(rows: Sequence[Mapping[str, Any]], case: Case, impl: str | None = None) -> dict[Cell, float]:
    """`impl` (default: the case's ours) / reference of the case's ratio metric per cell: each side's
    median over the repeats of this run. Cells where either side is missing or failed its check have
    no ratio."""
    out = {}
    for key, ours, ref in _paired(rows, case, impl):
        theirs = median([v for vs in ref.values() for v in vs])
        if theirs > 0:
            out[key] = median([v for vs in ours.values() for v in vs]) / theirs
    return out


def ratio_spread(rows: Sequence[Mapping[str, Any]], case: Case,
                 impl: str | None = None) -> dict[Cell, tuple[float, float]]:
    """Per cell measured in two or more repeats: the lowest and highest ratio of `impl` to the
    reference within one repeat (the two measured back to back). A spread across 1 means this run
    cannot tell them apart."""
    out = {}
    for key, ours, ref in _paired(rows, case, impl):
        theirs = {rep: median(vs) for rep, vs in ref.items()}
        paired = [median(vs) / theirs[rep] for rep, vs in ours.items() if theirs.get(rep, 0) > 0]
        if len(paired) >= 2:
            out[key] = (min(paired), max(paired))
    return out


def summarize(samples: Sequence[float], digits: int = 4) -> dict[str, float]:
    """Order statistics of a sample list (nearest rank, as outboard::stats), the count and the mean."""
    from .. import _core

    values = [float(v) for v in samples]
    s = _core.summarize(values)
    return ({k: round(float(s[k]), digits) for k in ("p50", "p90", "p99", "p999", "min", "max")}
            | {"count": int(s["count"]), "avg": round(sum(values) / max(len(values), 1), digits)})


class MachineWatch:
    """The machine's state around each measurement: ``probe`` gives the core-to-core time in ns
    (None with fewer than two cores); slow states are waited out as SLOW_STATE_FACTOR says."""

    def __init__(self, probe: Callable[[], float | None], sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.probe, self.sleep, self.clock = probe, sleep, clock
        self.probes: list[float] = []
        self.waited_s = 0.0
        self.retaken = 0  # measurements taken again because the slow state came during them
        self._lasting = False  # the last wait ended with the state still slow

    def settle(self) -> float | None:
        """Core-to-core ns once the state is usual, or when waiting gave up; the probes before
        measurements (not the waits' or the afters') make the baseline."""
        ns = self.probe()
        if ns is None:
            return None
        if self.slow(ns) and not self._lasting:
            start = self.clock()
            while ns is not None and self.slow(ns) and self.clock() - start < SLOW_STATE_WAIT_S:
                self.sleep(SLOW_STATE_PROBE_S)
                ns = self.probe()
            self.waited_s += self.clock() - start
        if ns is not None:
            self._lasting = self.slow(ns)
            self.probes.append(ns)
        return ns

    def slow(self, ns: float | None) -> bool:
        return ns is not None and bool(self.probes) and ns > SLOW_STATE_FACTOR * median(self.probes)


def _core_to_core_ns() -> float | None:
    from .. import machine

    c2c = machine.core_to_core()
    return None if c2c is None else float(c2c["p50_ns"])


def measurements_in(rows: Sequence[Mapping[str, Any]], state: str) -> list[tuple[str, Cell, int, str, float]]:
    """(case, cell, repeat, impl, core-to-core ns) of the measurements with a probe before or after
    them in `state` (one of UNUSUAL_STATES), judged against the whole run's median probe before
    measurements (the watch judged each against those before it). A state that lasted half the run
    would pass for the usual one; on these VMs the slow one lasts about a tenth."""
    assert state in UNUSUAL_STATES, state
    probes = [r["metrics"]["core_to_core_ns"] for r in rows if "core_to_core_ns" in r["metrics"]]
    if not probes:
        return []
    usual = median(probes)
    out = []
    for r in rows:
        seen = [r["metrics"][k] for k in ("core_to_core_ns", "core_to_core_after_ns") if k in r["metrics"]]
        if not seen:
            continue
        if state == "slow":
            ns = max(seen)
            found = ns > SLOW_STATE_FACTOR * usual
        else:
            ns = min(seen)
            found = ns < usual / SHARED_CORE_FACTOR
        if found:
            out.append((r["case"], cell_key(r["params"]), int(r["params"].get("repeat", 0)), r["impl"], ns))
    return out


class _Progress:
    """A one-line progress bar on stderr (a terminal only)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done = total, 0
        self.enabled = enabled and sys.stderr.isatty()
        self.start = time.monotonic()

    def step(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        elapsed = time.monotonic() - self.start
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {elapsed:5.0f}s {label[:50]:<50}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def command_line(suite: Suite, options: Options) -> str:
    """The command that reproduces a run (its output directory aside)."""
    parts = ["outboard", "bench", suite.name]
    parts += ["--quick"] if options.quick else []
    parts += ["--repeat", str(options.repeat)] if options.repeat != 1 else []
    parts += ["--cases", ",".join(options.cases)] if options.cases else []
    parts += ["--agent", options.agent] if options.agent else []
    return shlex.join(parts)


def run(suite: Suite, options: Options, watch: MachineWatch | None = None) -> Path:
    """Runs the suite; returns the directory holding results.jsonl, meta.json, report.md, charts/.
    ``watch``: the machine's state around each measurement (default: the core-to-core probe)."""
    from . import report

    directory = run_dir(suite.name, options.out)
    cases = [c for c in suite.cases if not options.cases or c.name in options.cases]
    results = Results(directory, suite.name, {
        "command": command_line(suite, options), "quick": options.quick, "repeat": options.repeat,
        "cases": [c.name for c in cases], "skipped": {}, "failed": {},
    })
    plan = [(case, params) for case in cases for params in case.cells(options.quick)]
    bar = _Progress(sum(len(c.impls) for c, _ in plan) * options.repeat, options.progress)
    watch = watch or MachineWatch(_core_to_core_ns)
    try:
        with suite.setup(options) as env:
            try:
                for case, params in plan:
                    for rep in range(options.repeat):
                        for impl in _rotated(case.impls, rep):
                            bar.step(f"{case.name} {impl.name} {params}")
                            _measure(results, case, impl, env, params, rep, watch)
            finally:  # what the measurements saw (transports in use), even after Ctrl-C
                results.meta.update(suite.describe(env))
                results.meta["slow_state_waited_s"] = round(watch.waited_s, 1)
                results.meta["slow_state_retaken"] = watch.retaken
    finally:
        bar.close()
        results.close()
    report.write(directory, suite)
    print(report.summary(directory, suite))
    print(f"\nresults: {directory}/results.jsonl  report: {directory}/report.md")
    return directory


def _rotated(impls: Sequence[Impl], k: int) -> Iterator[Impl]:
    n = len(impls)
    for i in range(n):
        yield impls[(i + k) % n]


def _measure(results: Results, case: Case, impl: Impl, env: Any, params: dict[str, Any], rep: int,
             watch: MachineWatch) -> None:
    where = f"{case.name}/{impl.name} {params}"
    reason = impl.unavailable(env, params)
    if reason:
        results.meta["skipped"][where] = reason
        return
    for attempt in range(2):
        before = watch.settle()
        try:
            m = impl.measure(env, params)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # a peer or cell failing is recorded, the run goes on
            results.meta["failed"][where] = f"{type(e).__name__}: {e}"
            return
        after = watch.probe() if before is not None else None
        if attempt == 0 and watch.slow(after) and not watch.slow(before):
            watch.retaken += 1
            continue
        break
    metrics = m.metrics if before is None else {**m.metrics, "core_to_core_ns": before}
    if after is not None:
        metrics["core_to_core_after_ns"] = after
    results.add(case.name, impl.name, {**params, "repeat": rep}, metrics, {"ok": m.ok, **m.correctness}, m.series)
