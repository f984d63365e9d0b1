"""What a benchmark suite declares (see README.md beside this file): its cases, each a parameter sweep
(a smaller one for ``--quick``) over implementations — ours and its peers — with the peer that
ratios are taken against and the goal a ratio has; the table columns and the charts; its own
command-line options; and, for a suite whose measurements are not cells × implementations, a body
of its own with its own renderer. harness.py runs a declaration, report.py renders its rows.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _options
from ..errors import BadConfig

#: The implementation that is ours in every suite; ratios are ours / peer.
OURS = "outboard"


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
class Goal:
    """What the case's ratio should be: at most ``ratio`` (at least, where higher is better), in the
    cells whose parameters include ``where`` (every cell when empty). The report says of each such
    cell whether its repetitions meet it, miss it, or straddle it (undecided by this run)."""

    ratio: float
    where: Mapping[str, Any] = field(default_factory=dict)

    def applies(self, params: Mapping[str, Any]) -> bool:
        return all(params.get(k) == v for k, v in self.where.items())


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
    goal: Goal | None = None
    notes: str = ""

    def cells(self, quick: bool, given: Mapping[str, Sequence[Any]] | None = None) -> list[dict[str, Any]]:
        """The swept parameters' combinations: the sweep, the quick one's values over it, and values
        given on the command line (an Option with ``sweep``) over both."""
        sweep = {**self.sweep, **(self.quick if quick else {})}
        sweep |= {k: v for k, v in (given or {}).items() if k in sweep}
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
class Option:
    """One command-line option of a suite's own (``outboard bench <suite> --flag``), declared once:
    the flag, its help, its default as it would be typed, and ``parse``, which turns the text into
    the value the suite reads from ``Options.extra[dest]`` and raises BadConfig naming the flag.
    ``type`` is what ``--json`` accepts (str, int, or bool for a switch). A switch may select
    ``cases`` (graph's --offload adds its case to --cases); an option with ``sweep`` replaces that
    swept parameter's values (its parse returns the list)."""

    flag: str
    help: str
    default: Any = None
    parse: Callable[[Any], Any] | None = None
    type: type = str
    choices: Sequence[str] = ()
    metavar: str | None = None
    cases: Sequence[str] = ()
    sweep: str | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.type is bool:
            parser.add_argument(self.flag, action="store_true", help=self.help)
            return
        parser.add_argument(self.flag, type=self.type, default=self.default, help=self.help,
                            choices=list(self.choices) or None, metavar=self.metavar)

    def value(self, given: Any) -> Any:
        return self.parse(given) if self.parse is not None and given is not None else given

    def text(self, value: Any) -> list[str]:
        """The command-line words that give `value` (for the command that reproduces a run)."""
        if self.type is bool:
            return [self.flag] if value else []
        if isinstance(value, (list, tuple)):
            return [self.flag, ",".join(map(str, value))]
        return [self.flag, str(value)]


def numbers(flag: str, kind: type = int, minimum: float = 0) -> Callable[[str], list[Any]]:
    """A parse for an Option that takes a comma-separated list of numbers, each at least
    ``minimum``; a wrong one is a BadConfig naming the flag."""
    def parse(text: str) -> list[Any]:
        try:
            values = [kind(x) for x in str(text).split(",") if x.strip()]
        except ValueError:
            values = []
        if not values or min(values) < minimum:
            raise BadConfig(f"{flag}: '{text}' is not a comma-separated list of {kind.__name__}s >= {minimum}")
        return values
    return parse


@dataclass
class Options:
    quick: bool = False
    #: Checks that every cell runs and answers right, measuring nothing: the quick sweep, each cell
    #: once (no ratio repetitions), no waiting out the VM's slow states; suites with a body of their
    #: own shorten it too. What the tests run; its report says its figures are not measurements.
    smoke: bool = False
    out: str | None = None
    agent: str | None = None
    repeat: int = 1
    log_level: str = "warning"
    progress: bool = True
    cases: Sequence[str] = ()
    #: The suite's own options (Suite.options), parsed, by Option.dest.
    extra: dict[str, Any] = field(default_factory=dict)


def _no_env(options: Options) -> AbstractContextManager[Any]:
    return nullcontext(None)


@dataclass(frozen=True)
class Suite:
    name: str  # its name after `outboard bench`, in meta.json and in results/<name>-<time>/
    title: str
    cases: Sequence[Case] = ()
    charts: Sequence[Chart] = ()
    #: Opens what the measurements need (agents, peers); yields the env passed to Impl.measure.
    setup: Callable[[Options], AbstractContextManager[Any]] = _no_env
    #: Extra meta.json entries from the env after the run (transports in use, versions).
    describe: Callable[[Any], dict[str, Any]] = lambda env: {}
    notes: str = ""
    #: One line for `outboard bench --help`, and what --quick gives.
    help: str = ""
    quick_help: str = "a smoke run (under a minute)"
    #: Its own command-line options, beside the harness's (--quick, --out, --no-progress; with cases
    #: --repeat and --cases; with ``uses_agent`` --agent).
    options: Sequence[Option] = ()
    uses_agent: bool = True
    #: Refuses options that cannot run (raising BadConfig) before anything is written.
    check: Callable[[Options], None] = lambda options: None
    #: A suite whose measurements are not cells × implementations runs this instead of its cases:
    #: body(run, env), adding rows to run.results and stepping run.progress (harness.Run).
    body: Callable[[Any, Any], None] | None = None
    #: Its own report.md (rows, meta, run directory or None for the terminal) instead of the tables.
    render: Callable[[Sequence[Mapping[str, Any]], Mapping[str, Any], Path | None], str] | None = None
    #: A few lines for the terminal at the end of a run instead of the report's tables.
    brief: Callable[[Sequence[Mapping[str, Any]], Mapping[str, Any]], str] | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Registers the harness's options and the suite's own on its `outboard bench` parser."""
        _options.add_common(parser)
        parser.add_argument("--quick", action="store_true", help=self.quick_help)
        parser.add_argument("--smoke", action="store_true",
                            help="check that every cell runs and is right, measuring nothing (what the tests run)")
        parser.add_argument("--out", metavar="DIR", help=f"output directory (default results/{self.name}-<time>/)")
        if self.uses_agent:
            parser.add_argument("--agent", metavar="HOST:PORT", help="agent address (default: start a local agent)")
        if self.cases:
            parser.add_argument("--repeat", type=int, default=1,
                                help="measure every cell N times, order rotated (ratio rows at least 3)")
            parser.add_argument("--cases", help="comma-separated subset of the suite's cases")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
        for option in self.options:
            option.add_to(parser)

    def parse(self, args: argparse.Namespace) -> Options:
        """The run's options from a parsed command line; BadConfig names an option that is wrong."""
        known = [c.name for c in self.cases]
        cases = args.cases.split(",") if getattr(args, "cases", None) else []
        for option in self.options:
            if option.cases and getattr(args, option.dest):
                cases += [c for c in option.cases if c not in cases]
        if unknown := [c for c in cases if c not in known]:
            raise BadConfig(f"--cases: unknown {unknown}; {self.name} has {', '.join(known)}")
        repeat = getattr(args, "repeat", 1)
        if repeat < 1:
            raise BadConfig(f"--repeat is {repeat}; it must be at least 1")
        return Options(quick=args.quick or args.smoke, smoke=args.smoke, out=args.out, agent=getattr(args, "agent", None),
                       repeat=repeat, log_level=str(args.log_level), progress=not args.no_progress, cases=cases,
                       extra={o.dest: o.value(getattr(args, o.dest)) for o in self.options})

    def defaults(self) -> dict[str, Any]:
        """Its own options' values when none is given (Options.extra of a run started from code)."""
        return {o.dest: o.value(False if o.type is bool else o.default) for o in self.options}
