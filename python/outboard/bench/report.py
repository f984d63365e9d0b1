"""report.md and charts/*.png from a run directory's results.jsonl and meta.json; run comparison.

Rendering reads only the directory (and the suite's declaration), so ``outboard report DIR``
re-renders any past run. matplotlib is imported only when charts are drawn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import suite_module
from .declare import Case, Suite
from .stats import (SHARED_CORE_FACTOR, SLOW_STATE_FACTOR, SLOW_STATE_WAIT_S, Ratio, cell_key, get,
                    measurements_in, median, ratio_stats)


def load(directory: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    directory = Path(directory)
    results, meta = directory / "results.jsonl", directory / "meta.json"
    if not results.exists() or not meta.exists():
        raise FileNotFoundError(f"{directory} is not a benchmark run directory (needs results.jsonl and meta.json)")
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    return rows, json.loads(meta.read_text())


def _suite(meta: Mapping[str, Any]) -> Suite:
    suite: Suite = suite_module(meta["suite"]).SUITE
    return suite


def write(directory: Path, suite: Suite | None = None) -> Path:
    """(Re)writes DIR/report.md and DIR/charts/*.png; returns the report's path. The suite
    declaration defaults to the registered one named in meta.json."""
    directory = Path(directory)
    rows, meta = load(directory)
    text = render(suite or _suite(meta), rows, meta, directory)
    path = directory / "report.md"
    path.write_text(text + "\n")
    return path


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}" if abs(value) < 1e6 else f"{value:,.0f}"


def _cells(rows: Sequence[Mapping[str, Any]], case: Case) -> dict[tuple, dict[str, list[Mapping[str, Any]]]]:
    """cell key -> impl -> rows (one per repeat), in first-seen order."""
    cells: dict[tuple, dict[str, list[Mapping[str, Any]]]] = {}
    for r in rows:
        if r["case"] == case.name:
            cells.setdefault(cell_key(r["params"]), {}).setdefault(r["impl"], []).append(r)
    return cells


def _median_metric(rows: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    values = [v for v in (get(r["metrics"], metric) for r in rows) if v is not None]
    return median(values) if values else None


def case_table(case: Case, rows: Sequence[Mapping[str, Any]], verdicts: bool = True) -> list[str]:
    """The case's table; ``verdicts``: whether its goal's ratios say if they meet it (not in a smoke run)."""
    cells = _cells(rows, case)
    if not cells:
        return []
    swept = [k for k, _ in next(iter(cells))]
    ratio = {impl: ratio_stats(rows, case, impl) for impl in (case.ours, *case.also_ratio)}
    better = "lower" if case.lower_is_better else "higher"
    over = case.ours if not case.also_ratio else "ratio"
    band = ("; median of the repetitions' ratios, in brackets their lowest and highest"
            if any(r.repetitions > 1 for by_cell in ratio.values() for r in by_cell.values()) else "")
    ratio_head = [f"{over} / {case.reference} ({better} is better{band})"] if case.reference else []
    head = [*swept, "impl", *(c.label for c in case.columns), "check", *ratio_head]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, by_impl in cells.items():
        params = dict(key)
        for impl, impl_rows in by_impl.items():
            ok = all(r["correctness"].get("ok", False) for r in impl_rows)
            values = [_fmt(_median_metric(impl_rows, c.metric), c.digits) for c in case.columns]
            extra = []
            if case.reference:
                r = ratio.get(impl, {}).get(key)
                extra = ["" if r is None else _ratio_text(case, r, params, impl == case.ours, verdicts)]
            lines.append("| " + " | ".join([*(_param(params[k]) for k in swept), impl, *values,
                                             "ok" if ok else "**FAILED**", *extra]) + " |")
    return lines


SMOKE_NOTE = ("**A smoke run** (`--smoke`): every cell ran once, to check that it works and answers right. Its "
              "figures are not measurements: nothing was repeated, no slow state of the VM was waited out, and no "
              "goal is judged.")

#: How the report marks a goal's ratio, by its verdict (stats.Ratio.verdict).
GOAL_MARKS = {"met": "meets", "missed": "**misses**", "straddles": "**straddles**"}


def _ratio_text(case: Case, r: Ratio, params: Mapping[str, Any], goals: bool, verdicts: bool) -> str:
    """"**1.12×** (0.95–1.31)", and for the goal's ratio in a cell the goal covers, whether the
    repetitions meet it, miss it or straddle it (this run does not decide it)."""
    text = f"**{r.median:.2f}×**" if goals else f"{r.median:.2f}×"
    if r.repetitions > 1:
        text += f" ({r.low:.2f}–{r.high:.2f})"
    if goals and verdicts and case.goal is not None and case.goal.applies(params):
        verdict = r.verdict(case.goal.ratio, case.lower_is_better)
        text += f" {GOAL_MARKS[verdict]} goal {'≤' if case.lower_is_better else '≥'} {case.goal.ratio:g}×"
    return text


def _param(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1024 and v % 1024 == 0:
        return f"{v // 1048576} MiB" if v % 1048576 == 0 else f"{v // 1024} KiB"
    return str(v)


def render(suite: Suite, rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], directory: Path | None) -> str:
    """The report's text (charts drawn into DIRECTORY/charts; none when it is None): the suite's own
    renderer where it has one, else a table per case."""
    if suite.render is not None:
        text = suite.render(rows, meta, directory)
        if meta.get("smoke"):
            title, _, rest = text.partition("\n")
            text = f"{title}\n\n{SMOKE_NOTE}\n{rest}"
        return text
    lines = [f"# {suite.title}", "", *([SMOKE_NOTE, ""] if meta.get("smoke") else []), _machine_line(meta), ""]
    if meta.get("transports"):
        lines += [f"Transports in use: {meta['transports']}.", ""]
    if suite.notes:
        lines += [suite.notes, ""]
    for case in suite.cases:
        table = case_table(case, rows, verdicts=not meta.get("smoke"))
        if not table:
            continue
        lines += [f"## {case.title}", ""]
        if case.notes:
            lines += [case.notes, ""]
        lines += table
        for chart in (c for c in suite.charts if c.case == case.name):
            if directory is not None:
                png = draw(chart, case, rows, directory)
                if png:
                    lines += ["", f"![{chart.title}](charts/{png.name})"]
        lines.append("")
    unusual = {
        "slow": ("## Measured in the VM's slow state",
                 f"Measurements with a core-to-core probe before or after them over {SLOW_STATE_FACTOR:g}× the run's "
                 f"median, after waiting up to {SLOW_STATE_WAIT_S:g} s for it to pass "
                 f"({meta.get('slow_state_waited_s', 0)} s waited in all; {meta.get('slow_state_retaken', 0)} taken "
                 "again because it came during them); their figures between threads and processes are slower, not by "
                 "the same factor for every implementation:"),
        "shared core": ("## Measured with both vCPUs on one physical core",
                        f"Measurements with a core-to-core probe before or after them under 1/{SHARED_CORE_FACTOR:g} "
                        "of the run's median: the host ran the two vCPUs as SMT siblings of one core, so a cache line "
                        "crossed in ~20 ns and both sides shared one core's execution units. Nothing is taken "
                        "again. There the figures between threads and processes are mostly software: latency "
                        "ratios against ucx_perftest are higher than in the usual state, since ours runs more code "
                        "per message:")}
    for state, (title, text) in unusual.items():
        found = measurements_in(rows, state)
        if found:
            lines += [title, "", text, ""]
            lines += [f"- {case} {', '.join(f'{k}={_param(v)}' for k, v in key)}, repeat {rep}, {impl}: {ns:.0f} ns"
                      for case, key, rep, impl, ns in found] + [""]
    for title, key in (("Skipped", "skipped"), ("Failed", "failed")):
        if meta.get(key):
            lines += [f"## {title}", ""] + [f"- {where}: {why}" for where, why in meta[key].items()] + [""]
    lines.append(f"Reproduce: `{meta.get('command', 'outboard bench ' + suite.name)}` (git {meta.get('git', '?')}).")
    return "\n".join(lines)


def _core_to_core(meta: Mapping[str, Any]) -> str:
    before, after = meta.get("core_to_core_before"), meta.get("core_to_core_after")
    if not before:
        return ""
    a, b = before["cores"]
    text = f"; a cache line from core {a} to core {b} in {before['p50_ns']:.0f} ns before"
    return text + (f", {after['p50_ns']:.0f} ns after" if after else "")


def _machine_line(meta: Mapping[str, Any]) -> str:
    before = meta.get("load_before", [0])[0]
    after = meta.get("load_after", [before])[0]
    return (f"{meta.get('cpu', '?')}, {meta.get('cores', '?')} cores ({meta.get('virtualization', '?')}), "
            f"kernel {meta.get('kernel', '?')}, {meta.get('transport', '')}; load {before:.2f} before, "
            f"{after:.2f} after{_core_to_core(meta)}; started {meta.get('started', '?')}. A small VM is noisy: "
            "compare ratios within this run, not absolute figures across machines (the core-to-core time, "
            "which the host's placement of the vCPUs sets, moves every figure between processes). Values are "
            "medians over repeats.")


def draw(chart: Any, case: Case, rows: Sequence[Mapping[str, Any]], directory: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if chart.kind == "timeline":
        return _draw_timeline(plt, chart, case, rows, directory)
    lines: dict[str, list[tuple[float, float]]] = {}
    for key, by_impl in _cells(rows, case).items():
        params = dict(key)
        if chart.x not in params:
            continue
        for impl, impl_rows in by_impl.items():
            y = _median_metric(impl_rows, chart.metric)
            if y is None or (chart.logx and params[chart.x] <= 0) or (chart.logy and y <= 0):
                continue  # no place on a log axis
            label = " ".join([impl, *(f"{params[s]}" for s in chart.split if s in params)])
            lines.setdefault(label, []).append((float(params[chart.x]), y))
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, points in sorted(lines.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    if chart.logx:
        ax.set_xscale("log", base=2)
    if chart.logy:
        ax.set_yscale("log")
    ax.set_xlabel(chart.x)
    ax.set_ylabel(chart.ylabel)
    ax.set_title(chart.title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, directory, f"{case.name}-{chart.metric.replace('.', '-')}.png")


def _save(plt: Any, fig: Any, directory: Path, name: str) -> Path:
    out = directory / "charts"
    out.mkdir(exist_ok=True)
    path = out / name
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _draw_timeline(plt: Any, chart: Any, case: Case, rows: Sequence[Mapping[str, Any]],
                   directory: Path) -> Path | None:
    """One row of bars per instance: when each of its nodes ran (the case's first row that has spans)."""
    row = next((r for r in rows if r["case"] == case.name and r.get("series", {}).get("timeline")), None)
    if row is None:
        return None
    spans = row["series"]["timeline"]  # [instance, node, start_ns, end_ns]
    instances = sorted({s[0] for s in spans})
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(instances) + 1.6))
    colors = plt.get_cmap("tab10")
    for i in instances:
        bars = [(s[2] / 1e3, max(s[3] - s[2], 1) / 1e3) for s in spans if s[0] == i]
        ax.broken_barh(bars, (i - 0.4, 0.8), facecolors=colors(i % 10), edgecolor="black", linewidth=0.3)
    params = ", ".join(f"{k} {v}" for k, v in row["params"].items() if k != "repeat")
    ax.set_yticks(instances, [f"instance {i}" for i in instances])
    ax.set_xlabel("µs since the first node started")
    ax.set_title(f"{chart.title} ({row['impl']}: {params})")
    ax.grid(True, axis="x", alpha=0.3)
    return _save(plt, fig, directory, f"{case.name}-timeline.png")


def summary(directory: Path, suite: Suite | None = None) -> str:
    """The report's tables without charts, for the terminal."""
    rows, meta = load(directory)
    return render(suite or _suite(meta), rows, meta, None)


def compare(before: Path, after: Path) -> str:
    """Every metric in the suite's columns for cells both runs measured: before, after, after/before."""
    rows_a, meta_a = load(before)
    rows_b, meta_b = load(after)
    if meta_a["suite"] != meta_b["suite"]:
        raise ValueError(f"cannot compare a '{meta_a['suite']}' run with a '{meta_b['suite']}' run")
    suite = _suite(meta_a)
    if not suite.cases:
        raise ValueError(f"suite '{meta_a['suite']}' has no declared columns to compare")
    lines = [f"# {suite.title}: {Path(after).name} vs {Path(before).name}", "",
             f"Before: {_machine_line(meta_a)}", "", f"After: {_machine_line(meta_b)}", ""]
    for case in suite.cases:
        a, b = _cells(rows_a, case), _cells(rows_b, case)
        common = [k for k in b if k in a]
        if not common:
            continue
        lines += [f"## {case.title}", "", "| cell | impl | metric | before | after | after / before |",
                  "|---|---|---|---|---|---|"]
        for key in common:
            for impl in b[key]:
                if impl not in a[key]:
                    continue
                for col in case.columns:
                    va, vb = _median_metric(a[key][impl], col.metric), _median_metric(b[key][impl], col.metric)
                    if va is None or vb is None:
                        continue
                    change = f"{vb / va:.2f}×" if va else "—"
                    cell = ", ".join(f"{k}={_param(v)}" for k, v in key)
                    lines.append(f"| {cell} | {impl} | {col.label} | {_fmt(va, col.digits)} | "
                                 f"{_fmt(vb, col.digits)} | {change} |")
        lines.append("")
    return "\n".join(lines)
