"""The harness behind ``outboard bench <suite>``: runs a declared suite (declare.py; how to declare
one: README.md) and writes what it measured.

For a suite of cases it runs every cell for every implementation, interleaved: all repetitions of a
cell back to back, the order rotating on each (A B, B A, A B, ...), so that each ratio is taken
between two measurements made moments apart, and every case with a reference at least
MIN_RATIO_REPEATS times, ``--quick`` included (one pair decides nothing on a noisy VM); ``--smoke``
measures each cell once and waits for nothing, since it checks and does not measure. A suite with
a body of its own runs that instead, with the same progress bar, results and report. Each run writes
one row per measurement to results.jsonl, the machine and run context to meta.json, and report.md
with charts (report.py); the terminal gets the report's tables, or the suite's brief.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import machine
from . import report
from .declare import Case, Impl, Options, Suite
from .output import Results, run_dir
from .stats import SLOW_STATE_FACTOR, SLOW_STATE_PROBE_S, SLOW_STATE_WAIT_S, median

#: Repetitions of every cell of a case with a reference, whatever --repeat asks: a ratio's median
#: and spread need three at least.
MIN_RATIO_REPEATS = 3


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
    c2c = machine.core_to_core()
    return None if c2c is None else float(c2c["p50_ns"])


class Progress:
    """A one-line progress bar on stderr (a terminal only)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done = total, 0
        self.enabled = enabled and sys.stderr.isatty()
        self.start = time.monotonic()

    def expect(self, total: int) -> None:
        """Sets how many steps there are (a suite's body knows once it has its plan)."""
        self.total = total

    def step(self, label: str = "") -> None:
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


@dataclass
class Run:
    """What a suite's body gets: its options, the results it adds rows to (and whose meta it may
    extend), the progress bar it steps."""

    options: Options
    results: Results
    progress: Progress


def repeats(case: Case, options: Options) -> int:
    """How many times each cell of the case is measured."""
    if options.smoke:
        return 1
    return max(options.repeat, MIN_RATIO_REPEATS) if case.reference else options.repeat


def command_line(suite: Suite, options: Options) -> str:
    """The command that reproduces a run (its output directory aside)."""
    parts = ["outboard", "bench", suite.name]
    parts += ["--smoke"] if options.smoke else ["--quick"] if options.quick else []
    parts += ["--repeat", str(options.repeat)] if options.repeat != 1 else []
    parts += ["--cases", ",".join(options.cases)] if options.cases else []
    parts += ["--agent", options.agent] if options.agent else []
    defaults = suite.defaults()
    for option in suite.options:
        value = options.extra.get(option.dest, defaults[option.dest])
        if value != defaults[option.dest] and not option.cases:
            parts += option.text(value)
    return shlex.join(parts)


def run(suite: Suite, options: Options, watch: MachineWatch | None = None) -> Path:
    """Runs the suite; returns the directory holding results.jsonl, meta.json, report.md, charts/.
    ``watch``: the machine's state around each measurement (default: the core-to-core probe)."""
    suite.check(options)
    directory = run_dir(suite.name, options.out)
    cases = [c for c in suite.cases if not options.cases or c.name in options.cases]
    results = Results(directory, suite.name, {
        "command": command_line(suite, options), "quick": options.quick, "smoke": options.smoke,
        "repeat": options.repeat,
        "ratio_repeats": 1 if options.smoke else max(options.repeat, MIN_RATIO_REPEATS),
        "cases": [c.name for c in cases], "skipped": {}, "failed": {},
    })
    given = {o.sweep: options.extra[o.dest] for o in suite.options
             if o.sweep is not None and options.extra.get(o.dest) is not None}
    plan = [(case, params) for case in cases for params in case.cells(options.quick, given)]
    bar = Progress(sum(len(c.impls) * repeats(c, options) for c, _ in plan), options.progress)
    if options.smoke:  # a check, not a measurement: no state of the machine to wait out
        watch = MachineWatch(lambda: None)
    elif watch is None:
        watch = MachineWatch(_core_to_core_ns)
    try:
        with suite.setup(options) as env:
            try:
                if suite.body is not None:
                    suite.body(Run(options, results, bar), env)
                for case, params in plan:
                    for rep in range(repeats(case, options)):
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
    path = report.write(directory, suite)
    print(suite.brief(results.rows, results.meta) if suite.brief else report.summary(directory, suite))
    print(f"\nresults: {directory}/results.jsonl  report: {path}")
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
