"""`outboard bench tokenizer` runs end to end and records exactness with every speed figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

OUTBOARD = str(Path(sys.executable).parent / "outboard")


def test_quick_benchmark_writes_rows_meta_and_report(tmp_path) -> None:
    out = tmp_path / "run"
    # GPT-2 stands for the tiktoken families (cl100k and o200k take the same path with other peers).
    r = subprocess.run([OUTBOARD, "bench", "tokenizer", "--smoke", "--threads", "1",
                        "--models", "gpt2,tekken,mistral,bert", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["pinned_core"] in range(64) and "load_after" in meta and meta["models"] == ["gpt2", "tekken", "mistral", "bert"]
    chunk_rows = [row for row in rows if row["case"] == "chunk-8k"]
    impls = {(row["params"]["model"], row["impl"]) for row in chunk_rows}
    assert {("gpt2", "outboard"), ("gpt2", "tiktoken"), ("tekken", "outboard"), ("tekken", "mistral-common"),
            ("mistral", "outboard"), ("mistral", "sentencepiece"), ("bert", "outboard"), ("bert", "hf-tokenizers"),
            ("tekken", "hf-tokenizers"), ("mistral", "hf-tokenizers")} <= impls
    for row in chunk_rows:
        assert row["correctness"]["compared"] == 8
        if row["impl"] in ("outboard", "tiktoken", "hf-tokenizers", "mistral-common", "sentencepiece"):
            assert row["correctness"]["mismatched_chunks"] == 0, row
        p = row["metrics"]["us_per_chunk"]
        assert 0 < p["min"] <= p["p50"] <= p["p90"] <= p["p99"] <= p["max"]
    regimes = {(row["params"]["model"], row["impl"]): row for row in rows if row["case"] == "regimes"}
    assert {("gpt2", "outboard"), ("gpt2", "outboard, no cache"), ("gpt2", "tiktoken"), ("tekken", "outboard"),
            ("tekken", "outboard, no cache"), ("tekken", "mistral-common"), ("bert", "outboard")} <= set(regimes)
    for row in regimes.values():
        assert row["correctness"]["compared"] == 3 * row["params"]["chunks_per_regime"] > 0
        if row["impl"] in ("outboard", "outboard, no cache", "tiktoken", "hf-tokenizers", "mistral-common",
                           "sentencepiece"):
            assert row["correctness"]["differing_chunks"] == 0, row
        assert all(row["metrics"][r]["mb_per_s"] > 0 for r in ("cold", "warm", "unseen"))
    # Every implementation but the reference went through the exactness gate; Outboard passes it.
    gated = {(row["params"]["model"], row["impl"]): row["correctness"] for row in rows if row["case"] == "gate"}
    assert {(m, i) for m, i in impls if i != regimes[(m, "outboard")]["correctness"]["reference"]} == set(gated)
    for (model, impl), c in gated.items():
        assert all(v["compared"] > 0 for v in c["sets"].values()), (model, impl)
        if impl == "outboard":
            assert c["passed"] and all(v["differing"] == 0 == v["refused"] for v in c["sets"].values()), (model, c)
    report = (out / "report.md").read_text()
    assert "## GPT-2" in report and "## Mistral Tekken" in report and "## Mistral 7B" in report and "## BERT" in report
    assert "### Regimes" in report and report.count("### Exactness gate") == 4


def test_bpe_openai_is_a_cl100k_and_o200k_peer_where_it_is_installed(tmp_path) -> None:
    pytest.importorskip("bpe_openai", reason="bpe-openai is not installed (the bench's peers are installed by hand)")
    from outboard.bench.suites import tokenizer_speed

    text = "Hello wörld 12345 — привет 世界, it's 3.14159\n\n  done"
    for model in ("cl100k", "o200k"):
        impls, missing, reference = tokenizer_speed.MODELS[model](tmp_path)
        assert reference == "tiktoken" and "bpe-openai" not in missing
        assert list(impls["bpe-openai"](text)) == list(impls["tiktoken"](text)) == impls["outboard"](text).tolist()


META = {"cpu": "a cpu", "cores": 2, "virtualization": "none", "pinned_core": 1, "load_before": [0.0], "peers": {},
        "missing": {}, "models": ["cl100k"], "command": "outboard bench tokenizer", "git": "HEAD"}


def test_a_peer_that_refuses_a_worst_case_size_is_reported_refused_not_unequal() -> None:
    from outboard.bench.suites import tokenizer_speed

    def row(impl: str, size: int, metrics: dict, correctness: dict) -> dict:
        return {"case": "worst-case", "impl": impl, "params": {"model": "cl100k", "bytes": size}, "metrics": metrics,
                "correctness": correctness}

    rows = [row("outboard", 1024, {"ms": 1.0, "us_per_kb": 1.0}, {"equal_to_reference": True}),
            row("outboard", 2048, {"ms": 2.0, "us_per_kb": 1.0}, {"equal_to_reference": True}),
            row("peer", 1024, {"ms": 3.0, "us_per_kb": 3.0}, {"equal_to_reference": True}),
            row("peer", 2048, {}, {"refused": "ValueError: Input too long to encode safely"})]
    report = tokenizer_speed.render(rows, META)
    assert "| outboard | 1.0 | 2.0 | 1.0 | yes |" in report
    assert "| peer | 3.0 | refused | refused | yes |" in report


def test_the_fastest_exact_peer_is_one_that_passed_the_gate_and_every_chunk() -> None:
    from outboard.bench.suites import tokenizer_speed

    def regimes(impl: str, mb_per_s: float, differing: int = 0) -> dict:
        metrics = {r: {"mb_per_s": mb_per_s, "us_per_chunk": {"p50": 1.0}} for r in tokenizer_speed.REGIMES}
        return {"case": "regimes", "impl": impl, "params": {"model": "cl100k", "chunks_per_regime": 4},
                "metrics": metrics, "correctness": {"reference": "ref", "differing_chunks": differing, "compared": 12}}

    def gate(impl: str, differing: int) -> dict:
        sets = {"named traps": {"compared": 10, "differing": differing, "refused": 0, "examples": ["'x'"] * differing}}
        return {"case": "gate", "impl": impl, "params": {"model": "cl100k"}, "metrics": {},
                "correctness": {"reference": "ref", "sets": sets, "passed": differing == 0}}

    rows = [regimes("outboard", 100.0), regimes("ref", 10.0), regimes("fast but inexact", 400.0),
            regimes("exact", 50.0), regimes("wrong on a chunk", 300.0, differing=1),
            gate("outboard", 0), gate("fast but inexact", 2), gate("exact", 0), gate("wrong on a chunk", 0)]
    report = tokenizer_speed.render(rows, META)
    assert "differed on no chunk: ref, exact)" in report
    assert "| outboard | 0 / 12 | 100.0 (1.0 µs, 0.25× fastest, 2.00× fastest exact) |" in report
    assert "| fast but inexact | 2 / 10 | NO | 'x', 'x' |" in report and "| exact | 0 / 10 | yes |  |" in report
