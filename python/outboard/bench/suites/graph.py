"""Suite ``graph``: Outboard's task-graph runtime against oneTBB flow graph, OpenMP tasks,
thread-per-task pthreads and sequential order, in the reference protocol (task-graphs.md §6).

Every cell runs ``outboard-graph-bench`` (one native binary, one file per runtime) once per
runtime, runtimes interleaved; that process warms up (2 runs and at least 200 ms: a fresh process
runs slow at first on these VMs), then times R repetitions in-process (CLOCK_MONOTONIC) and checks
each one: the task counter equals K·n, every task saw its predecessors' stamps for the current run,
and the seed graph's digests and copies are right.
The 1 µs and 10 µs spin bodies are sized from one calibration per run, so every runtime spins the
same number of iterations.
Columns are medians (p50) and minima over the repetitions. ``threads`` counts every thread that
executes tasks, the caller included: Outboard runs threads−1 workers and its waiting caller
helps (TBB's caller joins its arena likewise; OpenMP's master thread is one of its team).
"""

from __future__ import annotations

import csv
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ..._agent import LocalAgent, find_executable
from ..declare import Case, Chart, Column, Goal, Impl, Measurement, Option, Options, Suite
from ..stats import summarize

#: Seconds one cell (one runtime) may take.
CELL_TIMEOUT_S = 300.0
#: Thread-per-task costs ~20-40 µs per task: cells above this many tasks skip it.
PTHREAD_MAX_TASKS = 20_000
#: Tasks per cell (K·n) at most, as the protocol caps a point.
MAX_TASKS = 1 << 22
RUNTIMES = ["outboard", "tbb", "omp", "pthread", "sequential"]
#: Bodies that spin a calibrated number of iterations.
SPIN_BODIES = ("1us", "10us")
#: Modes of the offloaded seed graph: all K in flight, a window, one at a time.
OFFLOAD_MODES = ("M3", "M4", "sync")


def executable() -> str:
    """Path of outboard-graph-bench: $OUTBOARD_GRAPH_BENCH, beside this Python, or on PATH."""
    return find_executable("outboard-graph-bench", "OUTBOARD_GRAPH_BENCH")


def _n(p: dict[str, Any]) -> int:
    return 3 if p["pattern"] == "seed" else int(p["n"])


def _cell_args(p: dict[str, Any]) -> list[str]:
    return ["--pattern", p["pattern"], "--n", str(_n(p)), "--mode", p["mode"], "--instances", str(p["K"]),
            "--threads", str(p["threads"]), "--body", p.get("body", "empty"), "--window", str(p.get("window", 8))]


def calibrate_spin() -> float:
    """ns per iteration of the spin bodies on this machine, measured once for a whole run."""
    r = subprocess.run([executable(), "--calibrate"], capture_output=True, text=True, timeout=CELL_TIMEOUT_S)
    if r.returncode != 0:
        raise RuntimeError(f"outboard-graph-bench --calibrate exited {r.returncode}: {r.stderr.strip()[-400:]}")
    return float(r.stdout)


def run_cell(runtime: str, p: dict[str, Any], reps: int, agent: str | None = None,
             ns_per_iteration: float | None = None, extra: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """The binary's CSV rows for one cell; raises with its stderr on failure. ``ns_per_iteration``
    sizes the spin bodies (else each process calibrates its own)."""
    cmd = [executable(), "--header", "--runtime", runtime, *_cell_args(p), "--reps", str(reps), *extra]
    if agent:
        cmd += ["--agent", agent]
    if ns_per_iteration:
        cmd += ["--ns-per-iteration", repr(ns_per_iteration)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=CELL_TIMEOUT_S)
    rows = list(csv.DictReader(r.stdout.splitlines()))
    if r.returncode != 0 and not rows:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-400:]}")
    return rows


def _reps(env: GraphEnv) -> int:
    return 1 if env.options.quick else 10  # quick: the harness repeats each cell (3 times with a reference)


def _spin(env: GraphEnv, p: dict[str, Any]) -> float | None:
    """The run's spin calibration for a cell with spin bodies, else None."""
    return env.ns_per_iteration() if p.get("body") in SPIN_BODIES else None


def _measure(runtime: str):
    def measure(env: GraphEnv, p: dict[str, Any]) -> Measurement:
        rows = run_cell(runtime, p, _reps(env), env.agent_address if runtime == "offload" else None,
                        _spin(env, p))
        tasks = int(rows[0]["K"]) * int(rows[0]["n"])
        threads, body_ns = int(rows[0]["threads"]), float(rows[0]["body_ns"])
        wall = [float(r["wall_ns"]) for r in rows]
        metrics = {
            "per_task_ns": summarize([float(r["per_task_ns"]) for r in rows]),
            "per_instance_ns": summarize([float(r["per_instance_ns"]) for r in rows]),
            "cpu_per_task_ns": summarize([float(r["cpu_ns"]) / tasks for r in rows]),
            "cpu_per_instance_ns": summarize([float(r["cpu_ns"]) / int(r["K"]) for r in rows]),
            # Core time beyond the bodies themselves, per task (protocol §6 metrics).
            "core_overhead_ns": summarize([(threads * w - tasks * body_ns) / tasks for w in wall]),
            "body_ns": body_ns, "build_ns": float(rows[0]["build_ns"]), "create_ns": float(rows[0]["create_ns"]),
            "startup_ns": float(rows[0]["startup_ns"]), "state_bytes": int(rows[0]["state_bytes"]),
            "rss_kb": int(rows[-1]["rss_kb"]), "idle_cpu_pct": float(rows[0]["idle_cpu_pct"]),
            "edges": int(rows[0]["edges"]), "repetitions": len(rows), "version": rows[0]["version"],
            "instances_per_s": summarize([1e9 / float(r["per_instance_ns"]) for r in rows]),
        }
        if float(rows[0]["lat_p50_ns"]) > 0:  # per-instance latency, submit to completion
            for q in ("p50", "p90", "p99"):
                metrics[f"latency_{q}_ns"] = summarize([float(r[f"lat_{q}_ns"]) for r in rows])
        failures = [r["check"] for r in rows if r["check"] != "ok"]
        return Measurement(metrics, not failures, {"tasks_per_rep": tasks, "failures": failures[:3]})
    return measure


def _measure_timeline(env: GraphEnv, p: dict[str, Any]) -> Measurement:
    """One more run of the cell with per-node timing on: every node's span, checked against its
    predecessors' (none may start before they all ended)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "timeline.csv"
        run_cell("outboard", p, 1, ns_per_iteration=_spin(env, p), extra=("--timeline", str(path)))
        rows = list(csv.DictReader(path.read_text().splitlines()))
    spans = [[int(r["instance"]), int(r["node"]), int(r["start_ns"]), int(r["end_ns"])] for r in rows]
    end = {(s[0], s[1]): s[3] for s in spans}
    early = [f"instance {r['instance']} node {r['node']}" for r, s in zip(rows, spans)
             if any(end[(s[0], int(q))] > s[2] for q in r["preds"].split(";") if q)]
    span_ns = max(s[3] for s in spans) - min(s[2] for s in spans)
    busy_ns = sum(s[3] - s[2] for s in spans)
    metrics = {"nodes": len(spans), "span_us": span_ns / 1e3, "busy_us": busy_ns / 1e3,
               "parallelism": busy_ns / span_ns if span_ns else 0.0}
    return Measurement(metrics, not early, {"started_before_a_predecessor_ended": early[:3]}, {"timeline": spans})


def _unavailable(runtime: str):
    def why(env: GraphEnv, p: dict[str, Any]) -> str | None:
        tasks = int(p["K"]) * _n(p)
        if runtime == "offload" and p["mode"] not in OFFLOAD_MODES:
            return f"the offloaded seed graph runs modes {', '.join(OFFLOAD_MODES)}"
        if tasks > MAX_TASKS:
            return f"K·n = {tasks} tasks exceeds the {MAX_TASKS} cap per point"
        if runtime == "pthread" and tasks > PTHREAD_MAX_TASKS:
            return f"thread per task: K·n = {tasks} tasks exceeds PTHREAD_MAX_TASKS {PTHREAD_MAX_TASKS}"
        if runtime == "sequential" and p["threads"] != 1:
            return "single-threaded baseline: measured at threads 1 only"
        return None
    return why


def _impls(*names: str) -> list[Impl]:
    return [Impl(n, _measure(n), _unavailable(n)) for n in names]


COLUMNS = [Column("ns/task p50", "per_task_ns.p50", 1), Column("ns/task min", "per_task_ns.min", 1),
           Column("ns/instance p50", "per_instance_ns.p50", 0), Column("CPU ns/task", "cpu_per_task_ns.p50", 1),
           Column("idle CPU %", "idle_cpu_pct", 1), Column("state B/instance", "state_bytes", 0)]

OVERHEAD = Case(
    "overhead", "Scheduling overhead: empty bodies, ns per task (M2 build once/run K in sequence, M3 K in flight)",
    sweep={"pattern": ["chain", "independent", "tree", "fanin", "random"], "n": [256, 4096], "K": [256],
           "mode": ["M2", "M3"], "threads": [1, 2]},
    quick={"pattern": ["chain", "random"], "n": [256], "K": [64]},
    impls=_impls("outboard", "tbb", "omp", "sequential"), columns=COLUMNS, reference="tbb",
    ratio_metric="per_task_ns.p50", goal=Goal(1.0),
    notes="Empty body: check the predecessors' stamps, stamp, one relaxed atomic increment. Taskflow on a "
          "2-vCPU VM (reference file, not run here): M2 32–60 ns/task (chain, independent), 50–80 (random); M3 "
          "100–150 (230–360 random). Goal: outboard ≤ TBB in every cell and ≤ 0.8× those. OpenMP has no build "
          "step: its M2 spawns each instance's tasks and waits; its M3 spawns all K first.")

SEED_MODES = Case(
    "seed_modes", "Seed graph (SHA-256 of 1 KiB ‖ 1 KiB copy → host check): µs-scale work per instance, every mode",
    sweep={"pattern": ["seed"], "body": ["seed", "empty"], "mode": ["M1", "M2", "M3", "M4", "sync"], "K": [1000],
           "threads": [1, 2]},
    quick={"body": ["seed"], "mode": ["M2", "M3", "sync"], "K": [300]},
    impls=_impls(*RUNTIMES), columns=COLUMNS, reference="pthread", ratio_metric="per_instance_ns.p50",
    goal=Goal(0.01),
    notes="The seed's pthread baseline, without its per-thread DOCA set-up: a thread per task, created and "
          "joined level by level (SHA and copy, then the check); it starts as many threads as tasks whatever "
          "`threads` says, so it appears in every row. Outboard runs SHA and copy as engine nodes "
          "(libsodium SHA-256, memcpy). M1 builds the graph for every instance; M4 keeps a window of 8 in "
          "flight (TBB and OpenMP in rounds of 8); sync submits one instance and waits, K times. Body `empty` "
          "keeps the shape without the work: the pure per-instance overhead (Taskflow: run_n 0.12 µs, concurrent "
          "copies 0.83–1.7, run().wait() 2.2–3.4). Goal: ≥ 100× the pthread baseline, ≤ 0.5 µs per instance in "
          "M3 (empty).")

SEED_INSTANCES = Case(
    "seed_instances", "Seed graph against K, the seed's instance counts (M3: all K in flight)",
    sweep={"pattern": ["seed"], "body": ["seed"], "mode": ["M3", "M2"], "K": [1, 10, 100, 300, 500, 1000, 10000],
           "threads": [2]},
    quick={"mode": ["M3"], "K": [10, 500]},
    impls=_impls(*RUNTIMES), columns=COLUMNS, reference="pthread", ratio_metric="per_instance_ns.p50",
    notes="The published experiment timed whole processes (device open and logging included) for N = 1–500 "
          "with GNU time; here only execution is timed, in-process.")

BODIES = Case(
    "bodies", "Calibrated 1 µs and 10 µs bodies: core time per task beyond the body",
    sweep={"pattern": ["chain", "independent", "random"], "n": [256], "K": [16], "body": ["1us", "10us"],
           "mode": ["M2", "M3"], "threads": [1, 2]},
    quick={"pattern": ["independent"], "body": ["1us"], "mode": ["M3"], "threads": [2]},
    impls=_impls("outboard", "tbb", "omp", "sequential"),
    columns=[Column("ns/task p50", "per_task_ns.p50", 0), Column("body ns", "body_ns", 0),
             Column("overhead core-ns/task", "core_overhead_ns.p50", 0), Column("CPU ns/task", "cpu_per_task_ns.p50", 0)],
    reference="tbb", ratio_metric="per_task_ns.p50",
    notes="Core-time overhead per task = (threads · wall − K · n · body) / (K · n); a spinning idle worker "
          "shows up there and in CPU ns/task. A 10 µs body is 99% of a task or more, so runtimes differ here by "
          "about as much as repeats of one runtime do: the bracketed range (with --repeat) says whether a "
          "ratio is ahead of that noise.")

TIMELINE = Case(
    "timeline", "When each node ran: K instances of a random DAG in flight at once (per-node timing on)",
    sweep={"pattern": ["random"], "n": [64], "K": [4], "body": ["1us"], "mode": ["M3"], "threads": [2]},
    impls=[Impl("outboard", _measure_timeline)],
    columns=[Column("nodes", "nodes", 0), Column("span µs", "span_us", 1), Column("busy µs", "busy_us", 1),
             Column("average parallelism", "parallelism", 2)],
    notes="Instance::enable_timing records each node's start and end (now_ns()) in its instance; the chart "
          "draws one run from them. Average parallelism = the nodes' summed time / the span. The check: "
          "no node started before all its predecessors ended.")

OFFLOAD = Case(
    "offload", "Seed graph offloaded to the agent (outboard bench graph --offload): SHA ‖ DMA there, check here",
    sweep={"pattern": ["seed"], "body": ["seed"], "mode": ["M3", "M4", "sync"], "K": [1, 10, 100, 300, 500, 1000],
           "threads": [2]},
    quick={"mode": ["M3", "sync"], "K": [10, 300]},
    impls=_impls("offload", "outboard", "pthread"), reference="pthread", ratio_metric="per_instance_ns.p50",
    ours="offload",
    columns=[Column("ns/instance p50", "per_instance_ns.p50", 0), Column("instances/s", "instances_per_s.p50", 0),
             Column("latency p50 ns", "latency_p50_ns.p50", 0), Column("p90 ns", "latency_p90_ns.p50", 0),
             Column("p99 ns", "latency_p99_ns.p50", 0), Column("client CPU ns/instance", "cpu_per_instance_ns.p50", 0)],
    notes="`offload` ships the seed graph to a local agent (its engine nodes on the agent's progress thread, "
          "DOCA's progress-engine model; `--graph-threads N` moves them to workers): each submit carries the "
          "instance's distinct 1 KiB payload into agent memory, SHA-256 and the copy run there, the copy and the "
          "digest land in this process's registered memory by one-sided puts, and the check runs here as a host "
          "node when both have landed; the completion comes back over the channel. Latency is submit to "
          "completion per instance (M3: all K submitted at once, so it includes waiting behind the others; M4: a "
          "window of 8; sync: one at a time). `outboard` runs the same graph in-process with 2 threads and "
          "`pthread` is the seed's baseline. Client CPU counts this process only (the agent's core is the "
          "offload's cost).")

SUITE = Suite(
    name="graph", title="Task graphs: build once, run many instances (DOCA Graph's model) vs TBB, OpenMP, pthreads",
    cases=[OVERHEAD, SEED_MODES, SEED_INSTANCES, BODIES, TIMELINE, OFFLOAD],
    charts=[Chart("overhead", "n", "per_task_ns.p50", "ns per task, empty bodies", "ns", logy=True,
                  split=["pattern", "mode", "threads"]),
            Chart("seed_instances", "K", "per_instance_ns.p50", "seed graph: ns per instance vs K", "ns",
                  logy=True, split=["mode"]),
            Chart("timeline", "K", "span_us", "Nodes of instances in flight", "", kind="timeline"),
            Chart("offload", "K", "latency_p50_ns.p50", "offloaded seed graph: latency p50 vs K", "ns",
                  logy=True, split=["mode"])],
    setup=lambda options: GraphEnv(options),
    describe=lambda env: {"graph_bench": executable(), "graph_agent": env.agent_address or "none"},
    help="task graphs: per-task and per-instance overhead vs TBB, OpenMP, pthreads",
    # A process per runtime, cell and repetition (three with a reference), each warming up.
    quick_help="a short run (three to four minutes: every ratio from three repetitions)",
    options=[Option("--offload", "the seed graph offloaded to the agent (the `offload` case alone, or with --cases)",
                    type=bool, cases=("offload",))],
    notes=__doc__.split("\n\n", 1)[1].replace("\n", " ").replace("``", "`").strip())


class GraphEnv:
    """The options, an agent for the offload case (--agent's, else a local one started here), and
    the spin calibration that every runtime's bodies share."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.agent_address: str | None = options.agent
        self._agent: LocalAgent | None = None
        self._ns_per_iteration: float | None = None

    def ns_per_iteration(self) -> float:
        if self._ns_per_iteration is None:
            self._ns_per_iteration = calibrate_spin()
        return self._ns_per_iteration

    def __enter__(self) -> GraphEnv:
        if self.agent_address is None and (not self.options.cases or "offload" in self.options.cases):
            self._agent = LocalAgent(log_level=self.options.log_level).start()
            self.agent_address = self._agent.address
        return self

    def __exit__(self, *exc: object) -> None:
        if self._agent is not None:
            self._agent.stop()
