"""Suite ``mpi`` with real mpirun, a real agent and the interposer: one small cell per MPI installed
(every implementation, a smoke run: one repetition), checking rows, the correctness check, the fixed-compute
variant and the helper's CPU; never timings."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from outboard.bench import harness, stats
from outboard.bench.declare import Options
from outboard.bench.suites import mpi as mpi_suite


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    available = [name for name in mpi_suite.SHM.sweep["mpi"]
                 if mpi_suite._unavailable("outboard", False)(None, {"mpi": name}) is None]
    if not available:
        pytest.skip("no MPI with its benchmark program and interposer is built here (scripts/bootstrap.sh)")
    case = dataclasses.replace(mpi_suite.SHM, sweep={"mpi": available, "op": ["alltoall"], "np": [2], "size": [4096]},
                               quick={})
    suite = dataclasses.replace(mpi_suite.SUITE, cases=[case])
    out = str(tmp_path_factory.mktemp("mpi") / "run")
    return harness.run(suite, Options(quick=True, smoke=True, out=out, progress=False))


def test_every_implementation_is_measured_checked_and_compared(small_run: Path) -> None:
    rows = [json.loads(line) for line in (small_run / "results.jsonl").read_text().splitlines()]
    meta = json.loads((small_run / "meta.json").read_text())
    assert meta["failed"] == {}
    mpis = {r["params"]["mpi"] for r in rows}
    assert {(r["params"]["mpi"], r["impl"]) for r in rows} == {(m, i) for m in mpis for i in ("stock", "progress",
                                                                                             "outboard")}
    for r in rows:
        assert r["correctness"]["ok"] and r["correctness"]["check"] == "ok", r
        m = r["metrics"]
        assert m["pure_us"] > 0 and m["overall_us"] > 0 and 0 <= m["overlap_pct"] <= 100
        assert m["fixed_overall_us"] > 0 and m["fixed_compute_us"] > 0  # compute = stock's pure latency
        assert r["params"]["repeat"] == 0
        assert ("helper_cpu_us" in m) == (r["impl"] == "outboard")
    ratios = stats.ratio_stats(rows, mpi_suite.SHM, "outboard")
    assert len(ratios) == len(mpis) and all(r.repetitions == 1 for r in ratios.values())
    report = (small_run / "report.md").read_text()
    assert "| outboard |" in report and "outboard / stock" in report


def test_the_wire_bound_regime_runs_in_a_shaped_namespace_and_removes_it(tmp_path: Path) -> None:
    """As root: stock MPI and Outboard (an agent per rank, agent to agent over the shaped link) in
    one small cell of one MPI, checked against the blocking collective; the namespace gone
    afterwards. Elsewhere: every row skipped naming root."""
    available = [name for name in mpi_suite.WIRE.sweep["mpi"]
                 if mpi_suite._unavailable("stock", False)(None, {"mpi": name}) is None]
    if not available:
        pytest.skip("no MPI with its benchmark program is built here (scripts/bootstrap.sh)")
    case = dataclasses.replace(mpi_suite.WIRE, sweep={"mpi": available[:1], "op": ["allreduce"], "np": [2],
                                                      "size": [4096]}, quick={},
                               impls=[i for i in mpi_suite.WIRE.impls if i.name != "progress"],
                               reference=None)  # one repetition: no ratio here
    suite = dataclasses.replace(mpi_suite.SUITE, cases=[case])
    out = harness.run(suite, Options(quick=True, smoke=True, out=str(tmp_path / "run"), progress=False))
    meta = json.loads((out / "meta.json").read_text())
    skipped = " ".join(meta["skipped"].values())
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    if os.geteuid() != 0:
        assert rows == [] and "run as root" in skipped
        return
    assert meta["failed"] == {} and meta["skipped"] == {}
    assert sorted(r["impl"] for r in rows) == ["outboard", "stock"]
    assert all(r["correctness"]["check"] == "ok" for r in rows)
    assert [r["metrics"]["helper_cpu_us"] > 0 for r in rows if r["impl"] == "outboard"] == [True]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"outboard-mpi-{os.getpid()}" not in listed
