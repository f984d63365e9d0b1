"""Suite ``rdma`` against a real agent and a real ucx_perftest: a smoke run, TCP, verification."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from outboard import _core, cli
from outboard.bench import harness, stats
from outboard.bench.declare import Options
from outboard.bench.suites import rdma
from outboard.bench.peers import ucx_perftest


def _rows(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rdma") / "smoke"
    assert cli.main(["bench", "rdma", "--smoke", "--out", str(out), "--no-progress"]) == 0
    return out


def test_smoke_run_measures_and_verifies_every_operation(smoke_run: Path) -> None:
    rows = _rows(smoke_run)
    meta = json.loads((smoke_run / "meta.json").read_text())
    assert meta["failed"] == {}
    ours = [r for r in rows if r["impl"].startswith("outboard")]
    assert {r["case"] for r in ours} == {"write_bw", "read_bw", "endpoints", "write_lat", "read_lat", "gpu_initiated"}
    assert all(r["correctness"]["ok"] for r in rows)
    for r in ours:
        if r["case"] == "gpu_initiated":  # the CPU's stores, checked by the agent after the last signal
            m = r["metrics"]
            assert m["bw_avg_mib_s"] > 0 and m["mpps"] > 0 and m["ops_per_iteration"] == 512
            assert r["correctness"]["verified"] == "agent checksum of its region after the last signal"
        elif r["case"].endswith("_bw") or r["case"] == "endpoints":
            m = r["metrics"]
            assert m["bw_peak_mib_s"] >= m["bw_avg_mib_s"] > 0 and m["mpps"] > 0
            assert m["ops_per_iteration"] == 512 and m["iterations"] == 100
        else:
            assert r["correctness"]["mismatches"] == 0
            t = r["metrics"]["t_us"]
            assert 0 < t["min"] <= t["p50"] <= t["p99"] <= t["p999"] <= t["max"]
    assert {r["params"]["endpoints"] for r in rows if r["case"] == "endpoints"} == {1, 2}


def test_gpu_memory_is_skipped_with_the_reason(smoke_run: Path) -> None:
    meta = json.loads((smoke_run / "meta.json").read_text())
    reasons = [why for where, why in meta["skipped"].items() if where.startswith("gpu/")]
    assert reasons and reasons[0] == rdma.gpu_unavailable(None, {})
    report = (smoke_run / "report.md").read_text()
    assert "GPU-initiated path" in report and reasons[0] in report


def test_gpu_initiated_writes_are_skipped_with_the_reason_where_no_device_is(smoke_run: Path) -> None:
    why = _core.cuda_usable()
    if why is None:
        pytest.skip("a CUDA device is usable here: the GPU machine runs the kernel")
    meta = json.loads((smoke_run / "meta.json").read_text())
    reasons = {why_skipped for where, why_skipped in meta["skipped"].items() if where.startswith("gpu_initiated/")}
    assert reasons == {why}
    assert why in (smoke_run / "report.md").read_text()


@pytest.mark.skipif(ucx_perftest.unavailable() is not None, reason="ucx_perftest missing")
def test_peer_columns_and_ratios(smoke_run: Path) -> None:
    rows = _rows(smoke_run)
    for case, metric in (("write_bw", "bw_avg_mib_s"), ("read_bw", "bw_avg_mib_s"), ("write_lat", "t_us.p50")):
        peer = [r for r in rows if r["case"] == case and r["impl"] == "ucx_perftest"]
        assert peer and all(stats.get(r["metrics"], metric) > 0 for r in peer), case
    assert stats.ratios(rows, rdma.WRITE_BW) and stats.ratios(rows, rdma.WRITE_LAT)
    report = (smoke_run / "report.md").read_text()
    assert "| size | transport | impl | #iterations | t_min µs | t_max µs | t_typical µs | t_avg µs | 99% µs | 99.9% µs |" \
        in report
    assert "BW peak MiB/s | BW average MiB/s | MsgRate Mpps" in report


def test_tcp_transport(tmp_path: Path) -> None:
    small = {"transport": ["tcp"], "size": [64]}
    suite = dataclasses.replace(rdma.SUITE, cases=[dataclasses.replace(rdma.WRITE_BW, quick=small),
                                                   dataclasses.replace(rdma.WRITE_LAT, quick=small),
                                                   dataclasses.replace(rdma.READ_LAT, quick=small)])
    d = harness.run(suite, Options(quick=True, smoke=True, out=str(tmp_path / "tcp"), progress=False))
    meta = json.loads((d / "meta.json").read_text())
    assert meta["failed"] == {} and meta["transports"]["tcp"] == "tcp"
    assert all(r["correctness"]["ok"] for r in _rows(d))
