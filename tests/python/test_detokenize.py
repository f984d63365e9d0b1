"""The agent's detokenize service: many sequences stepped together, with random numbers of ids, give
each the text the host's decode gives; a bad step fails alone; streams are the connection's own."""

from __future__ import annotations

import os
import random
import re
import signal
import struct
import time

import numpy as np
import pytest

import outboard
from outboard import corpus, errors


def stepped(detok, local: outboard.Tokenizer, docs: list[str], rng: random.Random) -> tuple[list[str], list]:
    """Each document's ids streamed in 1..5-id steps, every open sequence in one request per step."""
    ids = [local.encode(d, allowed_special=()) for d in docs]
    streams = [detok.stream() for _ in docs]
    texts, pos = [""] * len(docs), [0] * len(docs)
    while any(p < len(i) for p, i in zip(pos, ids)):
        live = [k for k in range(len(docs)) if pos[k] < len(ids[k])]
        steps = []
        for k in live:
            n = rng.randint(1, 5)
            steps.append((streams[k], ids[k][pos[k]:pos[k] + n]))
            pos[k] += n
        for k, text in zip(live, detok.step(steps, finish=[pos[k] >= len(ids[k]) for k in live])):
            assert isinstance(text, str), text
            texts[k] += text
    return texts, ids


@pytest.mark.parametrize("name", ["gpt2", "cl100k_base", "tekken", "mistral-v1"])
def test_streamed_text_equals_the_hosts_decode(client: outboard.Client, name: str) -> None:
    local, detok = outboard.offload.open_local(name), client.detokenizer(name)
    docs = corpus.build(400_000)[:40]
    texts, ids = stepped(detok, local, docs, random.Random(3))
    assert [t == local.decode(i) for t, i in zip(texts, ids)] == [True] * len(docs)
    assert detok.vocab_size == local.vocab_size


def test_an_uploaded_vocabulary_streams_as_the_named_one(client: outboard.Client) -> None:
    from outboard import vocab

    local = outboard.offload.open_local("mistral-v3")
    docs = ["[INST] Grüße, 世界 🙂 [/INST]", "  two leading spaces", "x"]
    texts, ids = stepped(client.detokenizer(vocab.path("mistral-v3")), local, docs, random.Random(1))
    assert texts == [local.decode(i) for i in ids]


def test_a_bad_step_fails_alone_and_leaves_its_stream_as_it_was(client: outboard.Client) -> None:
    local, detok = outboard.Tokenizer.gpt2(), client.detokenizer("gpt2")
    ids = local.encode("a🙂b")  # the emoji spans several ids: the stream holds its first bytes
    a, b = detok.stream(), detok.stream()
    assert detok.step([(a, ids[:2]), (b, ids[:1])]) == ["a", "a"]
    out = detok.step([(a, [10 ** 7]), (b, ids[1:]), (99_999, [1])])
    assert isinstance(out[0], errors.NotFound) and "token id 10000000" in str(out[0])
    assert out[1] == "🙂b" and isinstance(out[2], errors.NotFound) and "stream 99999" in str(out[2])
    assert detok.step([(a, ids[2:])], finish=True) == ["🙂b"]  # a kept what it held before the bad id
    assert isinstance(detok.step([(a, [])])[0], errors.NotFound)  # finishing closed it
    detok.close(b)
    with pytest.raises(errors.NotFound):
        detok.close(b)


def test_submitted_steps_run_in_order_and_answer_as_step_does(client: outboard.Client) -> None:
    """A server's pipeline: every step submitted before the one before it was taken, the texts taken
    late and out of order; they equal the host's decode, a bad step fails alone in its place."""
    local, detok = outboard.Tokenizer.gpt2(), client.detokenizer("gpt2")
    docs = corpus.build(100_000)[:12]
    ids = [local.encode(d, allowed_special=()) for d in docs]
    streams = [detok.stream() for _ in docs]
    tickets, rng = [], random.Random(4)
    pos = [0] * len(docs)
    while any(p < len(i) for p, i in zip(pos, ids)):
        live = [k for k in range(len(docs)) if pos[k] < len(ids[k])]
        steps = []
        for k in live:
            n = rng.randint(1, 3)
            steps.append((streams[k], np.asarray(ids[k][pos[k]:pos[k] + n], np.int32)))
            pos[k] += n
        tickets.append((detok.submit(steps, finish=[pos[k] >= len(ids[k]) for k in live]), live))
    bad = detok.submit([(streams[0], [1])])  # finished: closed
    texts = [""] * len(docs)
    for ticket, live in reversed(tickets):  # taken last first: each waits for its own answer
        for k, text in zip(live, detok.result(ticket)):
            texts[k] = text + texts[k]
    assert texts == [local.decode(i) for i in ids]
    (closed,) = detok.result(bad)
    assert isinstance(closed, errors.NotFound) and f"stream {streams[0]}" in str(closed)
    for taken in (bad, 10 ** 6):
        with pytest.raises(errors.InvalidArgument, match="was not submitted, or its result was taken"):
            detok.result(taken)
    ticket, deadline = detok.submit([(detok.stream(), [64])]), time.monotonic() + 10
    while (answer := detok.result(ticket, wait=False)) is None and time.monotonic() < deadline:
        pass
    assert answer == ["a"]


def test_submitted_steps_whose_results_are_not_taken_are_bounded(client: outboard.Client, monkeypatch) -> None:
    monkeypatch.setattr(outboard.detokenize, "MAX_UNTAKEN_STEPS", 3)
    detok = client.detokenizer("gpt2")
    stream = detok.stream()
    tickets = [detok.submit([(stream, [64])]) for _ in range(3)]
    with pytest.raises(errors.TooBig, match="3 submitted steps whose results were not taken, the limit "
                                            "MAX_UNTAKEN_STEPS"):
        detok.submit([(stream, [64])])
    assert detok.result(tickets[0]) == ["a"]
    tickets.append(detok.submit([(stream, [65])]))
    assert [detok.result(t) for t in tickets[1:]] == [["a"], ["a"], ["b"]]


def test_a_submitted_step_fails_at_its_result_where_its_request_does(agent: outboard.LocalAgent) -> None:
    client = outboard.connect(agent.address)
    detok = client.detokenizer("gpt2", timeout=0.5)
    stream = detok.stream()
    session = client.stats()["pid"]  # the agent's process that serves this client
    os.kill(session, signal.SIGSTOP)
    try:
        late = detok.submit([(stream, [64])])
        start = time.monotonic()
        with pytest.raises(errors.TimedOut):
            detok.result(late)
        assert 0.4 <= time.monotonic() - start < 1.5
        cut = detok.submit([(stream, [64])])
        client.close()
        with pytest.raises(errors.NotConnected):
            detok.result(cut)
    finally:
        os.kill(session, signal.SIGCONT)


def test_streams_cost_no_round_trip_and_a_connection_holds_at_most_its_limit(agent: outboard.LocalAgent) -> None:
    """A stream is named here and begun by its first step; the agent holds at most 65,536 of a
    connection's (kMaxStreamsPerConnection), and the one over fails alone, naming the limit."""
    with outboard.connect(agent.address) as client:
        detok = client.detokenizer("gpt2")
        unused = detok.stream()
        detok.close(unused)  # never stepped: closed here, the agent never knew it
        with pytest.raises(errors.NotFound, match=f"stream {unused} is not open"):
            detok.close(unused)
        streams = [detok.stream() for _ in range(1 << 16)]
        assert detok.step([(s, []) for s in streams]) == [""] * len(streams)
        one_more = detok.stream()
        over, kept = detok.step([(one_more, [64]), (streams[0], [64])])
        assert isinstance(over, errors.TooBig) and "65536 open streams, the limit kMaxStreamsPerConnection" in str(over)
        assert kept == "a"
        detok.step([(streams[1], [])], finish=True)  # a stream ended: room for the one refused
        assert detok.step([(one_more, [64])]) == ["a"]


def test_held_bytes_of_a_broken_character_end_as_replacement_on_finish(client: outboard.Client) -> None:
    local, detok = outboard.Tokenizer.gpt2(), client.detokenizer("gpt2")
    first_byte = next(i for i in range(256) if local.decode_bytes([i]) == b"\xe2")
    s = detok.stream()
    assert detok.step([(s, [first_byte])]) == [""]
    assert detok.step([(s, [])], finish=True) == ["\ufffd"]


def test_streams_are_the_connections_own_and_go_with_it(agent: outboard.LocalAgent) -> None:
    """Another connection cannot step a stream, nor another detokenizer of the same connection,
    whose streams of the same name are its own."""
    emoji = outboard.Tokenizer.gpt2().encode("🙂")
    with outboard.connect(agent.address) as one, outboard.connect(agent.address) as other:
        mine = one.detokenizer("gpt2")
        s = mine.stream()
        theirs, beside = other.detokenizer("gpt2"), one.detokenizer("gpt2")
        assert isinstance(theirs.step([(s, [64])])[0], errors.NotFound)
        assert isinstance(beside.step([(s, [64])])[0], errors.NotFound)
        assert mine.step([(s, emoji[:1])]) == [""]  # holds the emoji's first bytes
        b = beside.stream()
        assert b == s and beside.step([(b, [64])]) == ["a"]  # the same name, its own stream
        assert mine.step([(s, emoji[1:])]) == ["🙂"]


@pytest.mark.parametrize("payload, says", [
    (b"D\x00\x00\x00\x00\x01\x00\x00", "truncated (no count)"),
    (b"D" + struct.pack("<II", 0, 1), "truncated (steps)"),
    (b"D" + struct.pack("<II", 0, 1) + struct.pack("<IIB3x", 0, 3, 0) + b"\x00" * 4,
     "name 3 ids but the request carries 4 B"),
    (b"D" + struct.pack("<II", 0, 1 << 20), "exceeds kMaxStreamsPerConnection"),
    (b"D" + struct.pack("<II", 7, 1) + struct.pack("<IIB3x", 0, 0, 2), "tokenizer 7 was not opened"),
    (b"L\x09abc", "vocabulary format 9 is not"),
    (b"Z", "unknown detokenize request"),
])
def test_malformed_requests_are_refused_by_name(client: outboard.Client, payload: bytes, says: str) -> None:
    with pytest.raises(errors.Error, match=re.escape(says)):
        client.request("detokenize", payload)
    detok = client.detokenizer("gpt2")
    assert detok.step([(detok.stream(), [64])]) == ["a"]


def test_ids_come_as_any_int_sequence_and_ids_outside_int32_are_refused(client: outboard.Client) -> None:
    local, detok = outboard.Tokenizer.gpt2(), client.detokenizer("gpt2")
    ids = local.encode("hello world, again")
    strided = np.repeat(np.array(ids, np.int32), 2)[::2]
    forms = [ids, tuple(ids), np.array(ids, np.int32), np.array(ids, np.int64), strided]
    streams = [detok.stream() for _ in forms]
    assert detok.step(list(zip(streams, forms))) == ["hello world, again"] * len(forms)
    with pytest.raises(errors.InvalidArgument, match="step 0: id 4294967296 is not an int32"):
        detok.step([(streams[0], [2 ** 32])])
    with pytest.raises(errors.InvalidArgument, match="2 finish flags for 1 steps"):
        detok.step([(streams[0], [64])], finish=[True, False])
    assert detok.step([(streams[0], [64])], finish=True) == ["a"]  # refused calls sent nothing
