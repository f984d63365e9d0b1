"""Streaming decode: ids fed in pieces give, step by step, the text decode() gives at once (as UTF-8 with
errors="replace"), for every family, and never hold back more than a character's first bytes."""

from __future__ import annotations

import random

import numpy as np
import pytest

import outboard
from outboard import errors

from .test_gpt2_exact import report

NAMES = ["gpt2", "cl100k_base", "o200k_base", "tekken", "mistral-v1", "bert-base-uncased"]
SPECIALS_AS_TEXT = ("tekken", "mistral-v1")  # their encode reads special-token text as ordinary text


def stream(tok: outboard.Tokenizer, ids: np.ndarray, rng: random.Random) -> tuple[str, int]:
    s, parts, held, i = tok.decode_stream(), [], 0, 0
    while i < len(ids):
        n = rng.randint(1, 5)
        parts.append(s.step(ids[i:i + n]))
        held = max(held, s.pending_bytes)
        i += n
    return "".join(parts) + s.finish(), held


@pytest.mark.parametrize("name", NAMES)
def test_streaming_the_corpus_equals_decoding_it_whole(name: str, docs) -> None:
    tok, rng = outboard.offload.open_local(name), random.Random(1)
    sample = docs[::10]
    bad, most_held = [], 0
    for i, doc in enumerate(sample):
        ids = tok.encode(doc, allowed_special=() if name in SPECIALS_AS_TEXT else "all")
        text, held = stream(tok, ids, rng)
        most_held = max(most_held, held)
        if text != tok.decode(ids):
            bad.append(i)
    report(f"{name}: streamed decode vs decode ({len(sample)} documents)", len(sample), bad)
    assert most_held <= 3


def test_broken_bytes_stream_as_python_replaces_them() -> None:
    """Byte tokens in random order: lone continuation bytes, begun characters that never end, ones that
    end several ids later; the stream equals bytes.decode('utf-8', 'replace') of them all."""
    tok, rng = outboard.Tokenizer.gpt2(), random.Random(5)
    byte_ids = {}  # GPT-2's token of each byte
    for i in range(tok.vocab_size - 1):
        raw = tok.decode_bytes([i])
        if len(raw) == 1:
            byte_ids[raw[0]] = i
    assert len(byte_ids) == 256
    pool = [b"\xff", b"\xc0", b"\xe0\x80", b"\xed\xa0\x80", b"\x80", b"a", b" ", b"\xc3", b"\xc3\xa9",
            "😀".encode(), b"\xf0\x9f", b"\x98\x80", b"\xe2\x82", b"\xac"]
    bad = []
    for _ in range(3000):
        raw = b"".join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
        ids = np.array([byte_ids[b] for b in raw], dtype=np.int32)
        text, held = stream(tok, ids, rng)
        if text != raw.decode("utf-8", "replace") or held > 3:
            bad.append(raw)
    report("broken bytes, streamed vs Python's errors='replace'", 3000, bad)


def test_a_character_waits_for_its_last_byte_and_an_unknown_id_changes_nothing() -> None:
    tok = outboard.Tokenizer.gpt2()
    ids = tok.encode("x🙂🙂")  # each emoji spans several byte-level ids
    s = tok.decode_stream()
    out = [s.step(ids[:1])]
    held = []
    for i in ids[1:]:
        with pytest.raises(errors.NotFound):
            s.step([10 ** 6])  # refused, and the stream is as it was
        out.append(s.step(i))
        held.append(s.pending_bytes)
    assert "".join(out) == "x🙂🙂" and s.finish() == ""
    assert all(piece in ("", "x", "🙂", "🙂🙂") for piece in out) and max(held) > 0
