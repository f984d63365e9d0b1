"""Suite ``mpi-apps`` with real mpirun, a real agent and the interposer: every proxy (the FFT's
needs FFTW, which scripts/bootstrap.sh installs), one small cell per MPI installed, every
implementation once (a smoke run), checking its rows, its own correctness check, the phase
breakdown and the agent's CPU; never timings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from outboard.bench import harness
from outboard.bench.declare import Options
from outboard.bench.suites import mpi_apps


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    available = [name for name in mpi_apps.SHM.sweep["mpi"]
                 if all(mpi_apps._unavailable("outboard", False)(None, {"mpi": name, "proxy": proxy}) is None
                        for proxy in mpi_apps.PHASES)]
    if not available:
        pytest.skip("no MPI with the proxies and the interposer is built here (scripts/bootstrap.sh)")
    case = dataclasses.replace(mpi_apps.SHM, sweep={"mpi": available, "proxy": list(mpi_apps.PHASES), "np": [2],
                                                    "n": [12]}, quick={})
    suite = dataclasses.replace(mpi_apps.SUITE, cases=[case])
    out = str(tmp_path_factory.mktemp("mpi_apps") / "run")
    return harness.run(suite, Options(quick=True, smoke=True, out=out, progress=False))


def test_every_implementation_runs_the_proxy_checked_with_its_phases(small_run: Path) -> None:
    rows = [json.loads(line) for line in (small_run / "results.jsonl").read_text().splitlines()]
    assert json.loads((small_run / "meta.json").read_text())["failed"] == {}
    mpis = {r["params"]["mpi"] for r in rows}
    assert {(r["params"]["mpi"], r["params"]["proxy"], r["impl"]) for r in rows} == {
        (m, p, i.name) for m in mpis for p in mpi_apps.PHASES for i in mpi_apps.SHM.impls}
    for r in rows:
        m, proxy, correctness = r["metrics"], r["params"]["proxy"], r["correctness"]
        assert correctness["ok"] and correctness["check"] == "ok", r
        assert correctness["iterations"] == 20
        assert 0 < m["p50_us"] <= m["p90_us"] and m["rank_cpu_us"] > 0
        assert all(m[p] >= 0 for p in mpi_apps.PHASES[proxy])
        # The work that overlaps the communication.
        assert m[{"stencil": "interior_us", "cg": "multiply_us", "fft": "fft_us"}[proxy]] > 0
        if proxy == "fft":  # a 16^3 grid (about 12^3 points a rank) in 2 x 1 pencils, 4 batches a transpose
            assert correctness["n"] == mpi_apps.argument("fft", 12, 2) == 16
            assert correctness["dims"] == [2, 1] and correctness["batches"] == [4, 4]
            assert m["transpose_bytes"] == 2 * 16**3 // 2 * 16  # both transposes move all a rank holds
        else:
            assert correctness["dims"] == [2, 1, 1] and m["halo_bytes"] == 6 * 12 * 12 * 8
        assert ("helper_cpu_us" in m) == (r["impl"] in mpi_apps.P2P)
        if proxy == "cg":  # the pipelined solver's residual, recomputed, beside the classic one's
            assert r["correctness"]["residual"] <= 10 * r["correctness"]["classic_residual"]
    report = (small_run / "report.md").read_text()
    assert "| outboard |" in report and "| outboard-all |" in report and "ratio / stock" in report
