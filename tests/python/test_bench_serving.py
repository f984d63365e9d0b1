"""Suite ``serving``: a smoke run end to end (every placement serves distinct requests, each
request's prompt ids and streamed text checked), and the loop itself on a tokenizer that fails a step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from outboard import cli, errors
from outboard.bench import report, stats
from outboard.bench.suites import serving
from outboard.hf import HFTokenizer


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serving") / "smoke"
    assert cli.main(["bench", "serving", "--smoke", "--out", str(out), "--no-progress"]) == 0
    return out


def test_every_placement_served_every_request_right(smoke_run: Path) -> None:
    rows, meta = report.load(smoke_run)
    assert meta["failed"] == {} and meta["tokenizer"] == "mistral-v3"
    assert {r["impl"] for r in rows} == {"host", "outboard", "outboard-encode", "outboard-sleep", "outboard-wait",
                                         "outboard-ahead"}
    for r in rows:
        c, m = r["correctness"], r["metrics"]
        assert c["ok"] and c["requests"] == r["params"]["requests"], r
        assert c["wrong_prompt_ids"] == c["wrong_streamed_texts"] == 0
        assert m["answer_ids"] == r["params"]["max_tokens"] and m["prompt_ids"] > 100
        assert 0 < m["first_chunk_ms"]["p50"] <= m["last_chunk_ms"]["p50"]
        assert (m["agent_cpu_us_per_request"] > 0) == (r["impl"] != "host")
    (case,) = serving.SUITE.cases
    assert all(v > 0 for v in stats.ratios(rows, case).values())
    assert "outboard-encode" in (smoke_run / "report.md").read_text()


def test_the_loop_streams_openai_chunks() -> None:
    tok = HFTokenizer("tekken")
    answer = tok.encode("Grüße 🙂, world", add_special_tokens=False)
    body = {"model": "tekken", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 100, "stream": True}
    [served] = serving.serve(tok, tok.stream_decoder(), [(json.dumps(body).encode(), answer)], 4, 0.0)
    chunks = served["chunks"]
    assert chunks[-1] == b"data: [DONE]\n\n" and served["prompt_ids"] == tok.apply_chat_template(body["messages"])
    first, last = (json.loads(c.removeprefix(b"data: ")) for c in (chunks[0], chunks[-2]))
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"]["role"] == "assistant"
    assert last["choices"][0]["finish_reason"] == "length"
    assert serving._streamed_text(chunks) == "Grüße 🙂, world"
    call = {"id": "call00001", "type": "function", "function": {"name": "search_documents", "arguments": "{}"}}
    agent = {**body, "tools": serving.TOOLS, "messages": [
        *body["messages"], {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call00001", "content": '{"hits": []}'}]}
    [served] = serving.serve(tok, tok.stream_decoder(), [(json.dumps(agent).encode(), answer)], 4, 0.0)
    assert served["prompt_ids"] == tok.apply_chat_template(agent["messages"], serving.TOOLS)
    assert {tok.convert_tokens_to_ids(t) for t in ("[AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]")} <= set(
        served["prompt_ids"])
    [ahead] = serving.serve(tok, tok.stream_decoder(), [(json.dumps(agent).encode(), answer)], 4, 0.0, ahead=True)
    assert ahead["prompt_ids"] == served["prompt_ids"] and serving._streamed_text(ahead["chunks"]) == "Grüße 🙂, world"
    bad = [(json.dumps(body).encode(), [10**7])]
    with pytest.raises(errors.NotFound, match="token id 10000000"):
        serving.serve(tok, tok.stream_decoder(), bad, 4, 0.0)
