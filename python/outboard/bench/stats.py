"""The statistics of benchmark rows, pure: order statistics, medians, cell keys, the ratio of two
implementations with its spread over repetitions and whether that spread decides a goal, and the
VM states a core-to-core probe tells apart. Nothing here runs or renders anything; harness.py
(which measures) and report.py (which renders) both build on it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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

#: A cell: its swept parameters, sorted, without the repeat.
Cell = tuple[tuple[str, Any], ...]


def get(metrics: Mapping[str, Any], path: str) -> float | None:
    """A metric by "name" or "name.stat"; None when the implementation did not report it."""
    name, _, stat = path.partition(".")
    value = metrics.get(name)
    if stat:
        value = value.get(stat) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def cell_key(params: Mapping[str, Any]) -> Cell:
    return tuple(sorted((k, v) for k, v in params.items() if k != "repeat"))


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def summarize(samples: Sequence[float], digits: int = 4) -> dict[str, float]:
    """Order statistics of a sample list (nearest rank, as outboard::stats), the count and the mean."""
    from .. import _core

    values = [float(v) for v in samples]
    s = _core.summarize(values)
    return ({k: round(float(s[k]), digits) for k in ("p50", "p90", "p99", "p999", "min", "max")}
            | {"count": int(s["count"]), "avg": round(sum(values) / max(len(values), 1), digits)})


class RatioCase(Protocol):
    """What a ratio needs of a case (declare.Case has it): whose rows, which metric, against whom."""

    name: str
    reference: str | None
    ratio_metric: str | None
    ours: str


@dataclass(frozen=True)
class Ratio:
    """One implementation over the reference in one cell: the median of the ratios taken within each
    repetition (the two measured back to back), their lowest and highest, and how many there were."""

    median: float
    low: float
    high: float
    repetitions: int

    def verdict(self, goal: float, lower_is_better: bool) -> str:
        """"met" when every repetition meets the goal (a ratio at most it, or at least it where higher
        is better), "missed" when none does, "straddles" when the repetitions fall on both sides of
        it: this run cannot tell whether the goal is met."""
        best, worst = (self.low, self.high) if lower_is_better else (self.high, self.low)
        meets = (lambda r: r <= goal) if lower_is_better else (lambda r: r >= goal)
        if meets(worst):
            return "met"
        return "straddles" if meets(best) else "missed"


def _paired(rows: Sequence[Mapping[str, Any]], case: RatioCase,
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


def ratio_stats(rows: Sequence[Mapping[str, Any]], case: RatioCase, impl: str | None = None) -> dict[Cell, Ratio]:
    """`impl` (default: the case's ours) / reference of the case's ratio metric per cell, paired by
    repetition. Cells where no repetition has both sides (missing, or a failed check) have none."""
    out = {}
    for key, ours, ref in _paired(rows, case, impl):
        theirs = {rep: median(vs) for rep, vs in ref.items()}
        paired = [median(vs) / theirs[rep] for rep, vs in ours.items() if theirs.get(rep, 0) > 0]
        if paired:
            out[key] = Ratio(median(paired), min(paired), max(paired), len(paired))
    return out


def ratios(rows: Sequence[Mapping[str, Any]], case: RatioCase, impl: str | None = None) -> dict[Cell, float]:
    """The median ratio per cell (see ratio_stats)."""
    return {key: r.median for key, r in ratio_stats(rows, case, impl).items()}


def measurements_in(rows: Sequence[Mapping[str, Any]], state: str) -> list[tuple[str, Cell, int, str, float]]:
    """(case, cell, repeat, impl, core-to-core ns) of the measurements with a probe before or after
    them in `state` (one of UNUSUAL_STATES), judged against the whole run's median probe before
    measurements (the harness judged each against those before it). A state that lasted half the run
    would pass for the usual one; on these VMs the slow one lasts about a tenth."""
    if state not in UNUSUAL_STATES:
        raise ValueError(f"state '{state}' is not one of {', '.join(UNUSUAL_STATES)}")
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
