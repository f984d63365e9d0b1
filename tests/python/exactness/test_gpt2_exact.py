"""Exactness gate: GPT-2 BPE ids identical to tiktoken (r50k) and HF tokenizers. 0 differences passes."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

import outboard
from outboard import errors
from outboard.bench import gate

CONTEXTS, TRAPS = gate.GPT2_CONTEXTS, gate.GPT2_TRAPS


def report(what: str, compared: int, differences: list) -> None:
    print(f"{what}: compared {compared}, differences {len(differences)}", file=sys.stderr)
    assert differences == [], differences[:5]


def test_corpus_matches_tiktoken_and_hf(ours, tiktoken_gpt2, hf_gpt2, docs) -> None:
    size = sum(len(d.encode()) for d in docs)
    assert size >= 10_000_000 and len(set(docs)) == len(docs)
    mine = ours.encode_batch(docs, num_threads=2)
    tik = tiktoken_gpt2.encode_ordinary_batch(docs, num_threads=2)
    hf = [e.ids for e in hf_gpt2.encode_batch(docs, add_special_tokens=False)]
    diff_tik = [i for i in range(len(docs)) if mine[i].tolist() != tik[i]]
    diff_hf = [i for i in range(len(docs)) if mine[i].tolist() != hf[i]]
    tokens = sum(len(m) for m in mine)
    report(f"corpus vs tiktoken ({len(docs)} documents, {size / 1e6:.2f} MB, {tokens} tokens)", len(docs), diff_tik)
    report(f"corpus vs HF tokenizers ({len(docs)} documents)", len(docs), diff_hf)


def test_the_pre_token_cache_never_changes_ids(ours, tiktoken_gpt2, docs) -> None:
    """Cache off, a fresh default cache cold then warm, and a 4 KiB cache whose slots two threads replace
    all the time: each the same ids as tiktoken, document for document."""
    tik = tiktoken_gpt2.encode_ordinary_batch(docs, num_threads=2)
    fresh, tiny = ours.with_cache(outboard.tokenizer.DEFAULT_CACHE_BYTES), ours.with_cache(4096)
    runs = {"off": ours.with_cache(0).encode_batch(docs, num_threads=2), "cold": fresh.encode_batch(docs),
            "warm": fresh.encode_batch(docs), "4 KiB, 2 threads": tiny.encode_batch(docs, num_threads=2)}
    for name, mine in runs.items():
        report(f"cache {name} vs tiktoken", len(docs), [i for i in range(len(docs)) if mine[i].tolist() != tik[i]])


def test_decode_round_trips_the_corpus(ours, docs) -> None:
    bad = [i for i, d in enumerate(docs[::7]) if ours.decode(ours.encode(d)) != d]
    report("decode(encode(doc)) round trips", len(docs[::7]), bad)


def _all_code_point_strings() -> list[str]:
    cps = gate.code_points()
    return [ctx(c) for ctx in CONTEXTS for c in cps]


def test_every_code_point_in_six_contexts_matches_tiktoken(ours, tiktoken_gpt2) -> None:
    strings = _all_code_point_strings()
    mine = ours.encode_batch(strings, num_threads=2)
    # One call per string: tiktoken's thread-pool batch costs ~15x more per short string.
    tik = [tiktoken_gpt2.encode_ordinary(s) for s in strings]
    diff = [repr(s) for s, a, b in zip(strings, mine, tik) if a.tolist() != b]
    report(f"all code points x {len(CONTEXTS)} contexts vs tiktoken (Unicode {ours.unicode_version()})",
           len(strings), diff)


def test_every_code_point_in_two_contexts_matches_hf(ours, hf_gpt2) -> None:
    cps = gate.code_points()
    strings = [ctx(c) for ctx in CONTEXTS[:2] for c in cps]
    ids, offsets = ours.encode_batch(strings, num_threads=2, flat=True)
    hf = hf_gpt2.encode_batch(strings, add_special_tokens=False)
    diff = [repr(s) for i, (s, e) in enumerate(zip(strings, hf)) if ids[offsets[i]:offsets[i + 1]].tolist() != e.ids]
    report("all code points x 2 contexts vs HF tokenizers", len(strings), diff)


@pytest.mark.parametrize("text", TRAPS, ids=lambda t: repr(t[:24]))
def test_named_traps_match_both_references(ours, tiktoken_gpt2, hf_gpt2, text: str) -> None:
    mine = ours.encode_ordinary(text).tolist()
    assert mine == tiktoken_gpt2.encode_ordinary(text)
    assert mine == hf_gpt2.encode(text, add_special_tokens=False).ids


def test_worst_case_megabyte_without_spaces(ours, tiktoken_gpt2) -> None:
    rng = random.Random(5)
    letters = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(1 << 20))
    mine = ours.encode(letters)
    assert mine.tolist() == tiktoken_gpt2.encode_ordinary(letters)
    assert ours.encode("a" * (1 << 20)).tolist() == tiktoken_gpt2.encode_ordinary("a" * (1 << 20))


def test_long_pieces_of_real_subwords_match_tiktoken(ours, tiktoken_gpt2, ranks) -> None:
    # Pieces of 64 B and more take the backtracking encoder: glue real
    # vocabulary tokens (letters, digits or punctuation alike) so its
    # longest matches and retractions meet real merges, not just random bytes.
    classes = {
        "letters": [t.decode() for t in ranks if t.isalpha() and t.isascii()],
        "digits": [t.decode() for t in ranks if t.isdigit()],
        "punctuation": [t.decode() for t in ranks if t.isascii() and t and not any(c.isalnum() or c.isspace() for c in t.decode())],
    }
    rng = random.Random(11)
    pieces = []
    for name, tokens in classes.items():
        for _ in range(1500):
            piece = ""
            target = rng.choice((64, 100, 300, 2000))
            while len(piece) < target:
                piece += rng.choice(tokens)
            pieces.append(piece.capitalize() if rng.random() < 0.3 else piece)
    diff = [p[:40] for p in pieces if ours.encode_ordinary(p).tolist() != tiktoken_gpt2.encode_ordinary(p)]
    report("long pieces glued from real tokens vs tiktoken", len(pieces), diff)


def test_special_token_policy(ours, tiktoken_gpt2) -> None:
    text = "Hello<|endoftext|> world"
    with pytest.raises(errors.InvalidArgument) as e:
        ours.encode(text)
    assert "'<|endoftext|>' at byte offset 5" in str(e.value)
    with pytest.raises(ValueError):
        tiktoken_gpt2.encode(text)  # the same default in the reference
    assert ours.encode(text, allowed_special="all").tolist() == tiktoken_gpt2.encode(text, allowed_special="all")
    assert ours.encode(text, allowed_special={"<|endoftext|>"}).tolist()[1] == 50256
    assert ours.encode_ordinary(text).tolist() == tiktoken_gpt2.encode_ordinary(text)
    assert ours.encode_ordinary("<|endoftext|>").tolist() == [27, 91, 437, 1659, 5239, 91, 29]
    with pytest.raises(errors.InvalidArgument):
        ours.encode(text, allowed_special={"<|startoftext|>"})
    assert ours.decode(ours.encode(text, allowed_special="all")) == text


def test_invalid_utf8_strict_names_offset_and_replace_matches_python(ours, tiktoken_gpt2) -> None:
    with pytest.raises(errors.InvalidArgument) as e:
        ours.encode(b"ab\xff cd")
    assert "byte offset 2" in str(e.value)
    assert ours.encode(b"ab\xff cd ef", utf8="replace").tolist() == [397, 4210, 22927, 304, 69]
    rng = random.Random(11)
    pool = [b"\xff", b"\xc0", b"\xe0\x80", b"\xed\xa0\x80", b"\xf4\x90", b"\xf0\x9f\x98", b"\x80", b"a", b" ", b"\xc3",
            "é".encode(), "😀".encode(), b"\xe2\x82"]
    cases = [b"".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(3000)]
    diff = [c for c in cases
            if ours.encode(c, utf8="replace").tolist() != tiktoken_gpt2.encode_ordinary(c.decode("utf-8", "replace"))]
    report("invalid UTF-8 under 'replace' vs Python errors='replace'", len(cases), diff)


def test_vocab_json_and_merges_load_to_the_same_ids(gpt2_files, ours, docs) -> None:
    from_files = outboard.Tokenizer.from_files(*gpt2_files)
    assert from_files.vocab_size == ours.vocab_size == 50257
    sample = docs[::5]
    diff = [i for i, d in enumerate(sample) if not np.array_equal(from_files.encode(d), ours.encode(d))]
    report("vocab.json+merges.txt vs .tiktoken", len(sample), diff)


def test_batch_flat_offsets_and_threads_agree(ours, docs) -> None:
    sample = docs[:200]
    ids, offsets = ours.encode_batch(sample, num_threads=4, flat=True)
    assert ids.dtype == np.int32 and len(offsets) == len(sample) + 1
    for i, d in enumerate(sample):
        assert np.array_equal(ids[offsets[i]:offsets[i + 1]], ours.encode(d))
