"""Exactness gate for cl100k_base: ids identical to tiktoken's, with the pre-token cache off, cold, warm and
contended. 0 differences passes."""

from __future__ import annotations

import random

import pytest

import outboard
from outboard import errors

from .test_gpt2_exact import SKIP_SURROGATES, report

# cl100k's traps sit where its pattern differs from r50k's: contractions in any case (and LONG S, which
# (?i) folds to s), one non-letter before letters, digits in threes, line breaks ending whitespace.
CONTEXTS = [
    lambda c: "a" + c + "a",
    lambda c: " " + c,
    lambda c: c + "'s",
    lambda c: "'" + c + "x",
    lambda c: "1" + c + "\n",
    lambda c: "\n" + c + "  " + c + "1234",
]
TRAPS = [
    "DON'T don't", "IT'S 'LL 'Ve 're 'D", "x'\u017fy '\u212a", "\t'modified", "\tword \u00a0word (foo) 'bar",
    "12345 678901234567890", "\u00b2\u00b3\u00bc5x \u0661\u0662\u0663\u0664", "a   b", "x\n\n  y", "trailing \n  ",
    "  \n  x", "!!!\n\nfoo", " !?\r\n", "hello\r\nworld\r\r\n", "a \t b", "\t\t1", "x \u0301y", "\u0085next\u2028line",
    "   ", "\n", "a" * 100_000, "9" * 50_000, "!?" * 30_000, "\n" * 10_000 + "x", "日本語" * 3000, "👍🏽" * 2000,
    "x = {'a': [1, 2]}\n    return f'{x!r}'\n",
]


def test_corpus_matches_tiktoken_with_the_cache_off_cold_warm_and_contended(cl100k, tiktoken_cl100k, docs) -> None:
    tik = tiktoken_cl100k.encode_ordinary_batch(docs, num_threads=2)
    fresh, tiny = cl100k.with_cache(outboard.tokenizer.DEFAULT_CACHE_BYTES), cl100k.with_cache(4096)
    runs = {"off": cl100k.with_cache(0).encode_batch(docs, num_threads=2), "cold": fresh.encode_batch(docs),
            "warm": fresh.encode_batch(docs), "4 KiB, 2 threads": tiny.encode_batch(docs, num_threads=2)}
    tokens = sum(len(t) for t in tik)
    for name, mine in runs.items():
        report(f"cl100k corpus, cache {name}, vs tiktoken ({len(docs)} documents, {tokens} tokens)", len(docs),
               [i for i in range(len(docs)) if mine[i].tolist() != tik[i]])


def test_every_code_point_in_six_contexts_matches_tiktoken(cl100k, tiktoken_cl100k) -> None:
    cps = [chr(c) for c in range(0x110000) if c not in SKIP_SURROGATES]
    strings = [ctx(c) for ctx in CONTEXTS for c in cps]
    mine = cl100k.encode_batch(strings, num_threads=2)
    tik = [tiktoken_cl100k.encode_ordinary(s) for s in strings]
    diff = [repr(s) for s, a, b in zip(strings, mine, tik) if a.tolist() != b]
    report(f"cl100k: all code points x {len(CONTEXTS)} contexts vs tiktoken", len(strings), diff)


@pytest.mark.parametrize("text", TRAPS, ids=lambda t: repr(t[:24]))
def test_named_traps_match_tiktoken(cl100k, tiktoken_cl100k, text: str) -> None:
    assert cl100k.encode_ordinary(text).tolist() == tiktoken_cl100k.encode_ordinary(text)


def test_long_pieces_and_random_mixtures_match_tiktoken(cl100k, tiktoken_cl100k) -> None:
    rng = random.Random(7)
    alphabet = "aZ9 '\t\n\r!.,é日\u00a0\u0301\u017f\u2028-_(){}0"
    cases = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300))) for _ in range(20_000)]
    cases += ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)) for n in (64, 300, 5000, 1 << 20)]
    diff = [c[:40] for c in cases if cl100k.encode_ordinary(c).tolist() != tiktoken_cl100k.encode_ordinary(c)]
    report("cl100k: random mixtures of its trap characters and long words vs tiktoken", len(cases), diff)


def test_special_tokens_are_tiktokens(cl100k, tiktoken_cl100k) -> None:
    assert cl100k.vocab_size == tiktoken_cl100k.n_vocab == 100277
    assert cl100k.eot_token == 100257
    text = "a<|fim_prefix|>b<|endofprompt|>c<|endoftext|>"
    with pytest.raises(errors.InvalidArgument) as e:
        cl100k.encode(text)
    assert "'<|fim_prefix|>' at byte offset 1" in str(e.value)
    assert cl100k.encode(text, allowed_special="all").tolist() == tiktoken_cl100k.encode(text, allowed_special="all")
    assert cl100k.encode_ordinary(text).tolist() == tiktoken_cl100k.encode_ordinary(text)
    assert cl100k.decode(cl100k.encode(text, allowed_special="all")) == text


def test_invalid_utf8_replace_matches_python(cl100k, tiktoken_cl100k) -> None:
    rng = random.Random(3)
    pool = [b"\xff", b"\xc0", b"\xe0\x80", b"\xed\xa0\x80", b"\x80", b"a", b" ", b"'", b"S", b"\n", b"1",
            "é".encode(), "😀".encode(), b"\xc5"]
    cases = [b"".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(3000)]
    diff = [c for c in cases
            if cl100k.encode(c, utf8="replace").tolist() != tiktoken_cl100k.encode_ordinary(c.decode("utf-8", "replace"))]
    report("cl100k: invalid UTF-8 under 'replace' vs Python errors='replace'", len(cases), diff)


def test_the_file_name_and_the_vocabulary_cache_choose_cl100k(cl100k, cl100k_path, docs) -> None:
    sample = docs[::20]
    expected = [cl100k.encode(d).tolist() for d in sample]
    for tok in (outboard.Tokenizer.cl100k_base(), outboard.Tokenizer.from_file(cl100k_path)):
        assert [tok.encode(d).tolist() for d in sample] == expected
    r50k_pattern = outboard.Tokenizer.from_tiktoken(cl100k_path)  # the same ranks split as GPT-2 splits
    assert r50k_pattern.encode("IT'S a 1234").tolist() == [964, 6, 50, 264, 220, 717, 1958]
    assert cl100k.encode("IT'S a 1234").tolist() == [964, 13575, 264, 220, 4513, 19]
