"""Suite ``checkpoint``: a smoke run end to end (a trainer process per placement, every checkpoint
read back and compared; a loader process per reader, its load compared; the report)."""

from __future__ import annotations

from pathlib import Path

import pytest

from outboard import cli
from outboard.bench import report, stats
from outboard.bench.suites import checkpoint


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("checkpoint") / "smoke"
    assert cli.main(["bench", "checkpoint", "--smoke", "--out", str(out), "--no-progress"]) == 0
    return out


def test_every_placement_ran_and_every_checkpoint_read_back_equal(smoke_run: Path) -> None:
    rows, meta = report.load(smoke_run)
    assert meta["failed"] == {} and meta["training_model"].startswith("numpy MLP")
    rows = [r for r in rows if r["case"] == "epoch"]
    assert {r["impl"] for r in rows} == {"none", "sync", "thread", "outboard", "outboard-tls"}
    for r in rows:
        assert r["correctness"]["ok"], r
        m = r["metrics"]
        expected = 0 if r["impl"] == "none" else r["params"]["steps"] // r["params"]["every"]
        assert m["checkpoints"] == r["correctness"]["checkpoints_read_back"] == expected
        assert m["written_mb"] == pytest.approx(0 if r["impl"] == "none" else expected * m["state_mb"], rel=0.01)
        assert m["memcpy_ms"] > 0 and m["memcpy_step_ms"] > 0
        if r["impl"] != "none":
            assert 0 < m["stall_ms"]["p50"] <= m["durable_ms"]["p50"] + 1e-6
    assert all(r["metrics"]["agent_cpu_ms_per_ckpt"] > 0 for r in rows if r["impl"].startswith("outboard"))


def test_every_reader_loaded_the_checkpoint_equal_and_outboard_holds_it_once(smoke_run: Path) -> None:
    rows = [r for r in report.load(smoke_run)[0] if r["case"] == "load"]
    assert {r["impl"] for r in rows} == {"safetensors", "outboard", "outboard-agent", "outboard-agent-tls"}
    for r in rows:
        m = r["metrics"]
        assert r["correctness"] == {"ok": True, "differing_tensors": []} and m["state_mb"] == r["params"]["state_mb"], r
        assert m["load_s"] > 0 and m["gb_s"] > 0 and m["cpu_s"] > 0
        if r["impl"].startswith("outboard"):  # the tensors and the pieces in flight, not the file besides
            assert m["state_mb"] <= m["peak_rss_growth_mb"] < 2 * m["state_mb"], r


def test_ratios_and_report(smoke_run: Path) -> None:
    rows, _ = report.load(smoke_run)
    for case, reference in zip(checkpoint.SUITE.cases, ("none", "safetensors")):
        r = stats.ratios([row for row in rows if row["case"] == case.name], case)
        assert r and all(v > 0 for v in r.values())
        assert f"ratio / {reference}" in (smoke_run / "report.md").read_text()
    assert "numpy MLP" in (smoke_run / "report.md").read_text()
