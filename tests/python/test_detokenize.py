"""The agent's detokenize service: many sequences stepped together, with random numbers of ids, give
each the text the host's decode gives; a bad step fails alone; streams are the connection's own."""

from __future__ import annotations

import random
import re
import struct

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


def test_held_bytes_of_a_broken_character_end_as_replacement_on_finish(client: outboard.Client) -> None:
    local, detok = outboard.Tokenizer.gpt2(), client.detokenizer("gpt2")
    first_byte = next(i for i in range(256) if local.decode_bytes([i]) == b"\xe2")
    s = detok.stream()
    assert detok.step([(s, [first_byte])]) == [""]
    assert detok.step([(s, [])], finish=True) == ["\ufffd"]


def test_streams_are_the_connections_own_and_go_with_it(agent: outboard.LocalAgent) -> None:
    with outboard.connect(agent.address) as one, outboard.connect(agent.address) as other:
        mine = one.detokenizer("gpt2")
        s = mine.stream()
        theirs = other.detokenizer("gpt2")
        assert isinstance(theirs.step([(s, [64])])[0], errors.NotFound)
        assert mine.step([(s, [64])]) == ["a"]


@pytest.mark.parametrize("payload, says", [
    (b"D\x01\x00\x00", "truncated (no count)"),
    (b"D\x01\x00\x00\x00", "truncated (steps)"),
    (b"D\x01\x00\x00\x00" + struct.pack("<IIB3x", 0, 3, 0) + b"\x00" * 4, "name 3 ids but the request carries 4 B"),
    (b"D" + struct.pack("<I", 1 << 20), "exceeds kMaxStreamsPerConnection"),
    (b"S\x07\x00\x00\x00", "tokenizer 7 was not opened"),
    (b"L\x09abc", "vocabulary format 9 is not"),
    (b"Z", "unknown detokenize request"),
])
def test_malformed_requests_are_refused_by_name(client: outboard.Client, payload: bytes, says: str) -> None:
    with pytest.raises(errors.Error, match=re.escape(says)):
        client.request("detokenize", payload)
    assert client.detokenizer("gpt2").step([(client.detokenizer("gpt2").stream(), [64])]) == ["a"]


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
