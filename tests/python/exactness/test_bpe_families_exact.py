"""Exactness gate for the BPE families after GPT-2: cl100k_base and o200k_base against tiktoken, Tekken
against mistral-common's Tekkenizer, SentencePiece BPE (Mistral 7B v0.1 and v0.3) against sentencepiece.
Ids identical with the pre-token cache off, cold, warm and contended; 0 differences passes."""

from __future__ import annotations

import random

import pytest

import outboard
from outboard import errors
from outboard.bench import gate

from .test_gpt2_exact import report


def test_corpus_with_the_cache_off_cold_warm_and_contended(family, docs) -> None:
    ours = family.ours
    expected = [family.reference(d) for d in docs]
    fresh, tiny = ours.with_cache(outboard.tokenizer.DEFAULT_CACHE_BYTES), ours.with_cache(4096)
    runs = {"off": ours.with_cache(0).encode_batch(docs, num_threads=2), "cold": fresh.encode_batch(docs),
            "warm": fresh.encode_batch(docs), "4 KiB, 2 threads": tiny.encode_batch(docs, num_threads=2)}
    tokens = sum(len(t) for t in expected)
    for name, mine in runs.items():
        report(f"{family.name} corpus, cache {name} ({len(docs)} documents, {tokens} tokens)", len(docs),
               [i for i in range(len(docs)) if mine[i].tolist() != expected[i]])


def test_every_code_point_in_contexts(family) -> None:
    cps = gate.code_points()
    contexts = gate.contexts(family.name)
    strings = [ctx(c) for ctx in contexts for c in cps]
    mine = family.ours.encode_batch(strings, num_threads=2)
    diff = [repr(s) for s, a in zip(strings, mine) if a.tolist() != family.reference_ordinary(s)]
    report(f"{family.name}: all code points x {len(contexts)} contexts", len(strings), diff)


def test_named_traps(family) -> None:
    diff = [t[:30] for t in gate.BPE_TRAPS if family.ours.encode_ordinary(t).tolist() != family.reference(t)]
    report(f"{family.name}: named traps", len(gate.BPE_TRAPS), diff)


def test_random_mixtures_of_trap_characters_and_long_words(family) -> None:
    cases = gate.mixtures()
    diff = [c[:40] for c in cases if family.ours.encode_ordinary(c).tolist() != family.reference(c)]
    report(f"{family.name}: random mixtures of its trap characters and long words", len(cases), diff)


def test_invalid_utf8_replace_matches_python(family) -> None:
    rng = random.Random(3)
    pool = [b"\xff", b"\xc0", b"\xe0\x80", b"\xed\xa0\x80", b"\x80", b"a", b"A", b" ", b"'", b"S", b"\n", b"1",
            "é".encode(), "😀".encode(), b"\xc5"]
    cases = [b"".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(3000)]
    diff = [c for c in cases
            if family.ours.encode(c, utf8="replace").tolist() != family.reference(c.decode("utf-8", "replace"))]
    report(f"{family.name}: invalid UTF-8 under 'replace' vs Python errors='replace'", len(cases), diff)


@pytest.mark.parametrize("name", ["cl100k", "o200k"])
def test_tiktoken_special_tokens(name: str) -> None:
    from outboard import vocab
    from outboard.bench import references

    encoding = references.ENCODINGS[name]
    path = vocab.path(encoding.vocab)
    ours, tik = outboard.Tokenizer.from_file(path), references.tiktoken_encoding(name, references.load_ranks(path))
    assert ours.vocab_size == tik.n_vocab and ours.eot_token == tik.eot_token
    text = "a<|endofprompt|>b<|endoftext|>"
    with pytest.raises(errors.InvalidArgument) as e:
        ours.encode(text)
    assert "'<|endofprompt|>' at byte offset 1" in str(e.value)
    assert ours.encode(text, allowed_special="all").tolist() == tik.encode(text, allowed_special="all")
    assert ours.encode_ordinary(text).tolist() == tik.encode_ordinary(text)
    assert ours.decode(ours.encode(text, allowed_special="all")) == text


def test_tekken_specials_are_mistral_commons() -> None:
    from outboard import vocab
    from outboard.bench import references

    ours, ref = outboard.Tokenizer.tekken(), references.tekken(vocab.path("tekken"))
    assert ours.vocab_size == ref.n_words == 131072
    text = "[INST] hi [/INST]</s><SPECIAL_999>"  # special-token text is ordinary text in Tekkenizer.encode
    assert ours.encode(text).tolist() == ref.encode(text, bos=False, eos=False)
    assert ours.encode(text, add_special_tokens=True).tolist() == ref.encode(text, bos=True, eos=False)
    with pytest.raises(errors.InvalidArgument, match="ordinary text"):
        ours.encode(text, allowed_special="all")
    ids = [ref.bos_id, *ref.encode("Hello", bos=False, eos=False), ref.eos_id, 999]
    assert ours.decode(ids) == ref.decode(ids) == "Hello"  # control ids are invisible, as Tekkenizer.decode's default


def test_the_file_name_chooses_the_pattern(family, docs) -> None:
    from outboard import vocab
    from outboard.bench import references

    sample = docs[::40]
    by_name = outboard.Tokenizer.from_file(vocab.path(family.vocab))
    assert [by_name.encode(d).tolist() for d in sample] == [family.reference(d) for d in sample]


@pytest.mark.parametrize("name", ["mistral-v1", "mistral-v3"])
def test_sentencepiece_controls_bos_and_decode(name: str, docs) -> None:
    from outboard import vocab
    from outboard.bench import references

    path = vocab.path(name)
    ours, sp = outboard.Tokenizer.from_file(path), references.sentencepiece(path)
    assert ours.vocab_size == sp.get_piece_size()
    text = "[INST] hi [/INST]</s>[REFERENCE_DOC_1]"  # control-token text is ordinary text in sentencepiece
    assert ours.encode(text).tolist() == sp.encode(text)
    assert ours.encode(text, add_special_tokens=True).tolist() == sp.encode(text, add_bos=True)
    with pytest.raises(errors.InvalidArgument, match="ordinary text"):
        ours.encode(text, allowed_special="all")
    sample = docs[::20]
    diff = [i for i, d in enumerate(sample) if ours.decode(sp.encode(d)) != sp.decode(sp.encode(d))]
    report(f"{name}: decode of the corpus ({len(sample)} documents)", len(sample), diff)
    # Random ids: controls are invisible, <unk> shows " ⁇ ", the first "▁" goes, byte pieces spell whole
    # characters (sentencepiece puts one U+FFFD per byte of a broken one, Python one per maximal part).
    rng = random.Random(11)
    plain = [i for i in range(sp.get_piece_size()) if not sp.is_byte(i)]
    byte_of = {int(sp.id_to_piece(i)[3:5], 16): i for i in range(sp.get_piece_size()) if sp.is_byte(i)}
    cases = []
    for _ in range(3000):
        ids = []
        for _ in range(rng.randint(0, 8)):
            if rng.random() < 0.2:
                ids += [byte_of[b] for b in rng.choice(["é", "日", "😀", "\n", "\x00"]).encode()]
            else:
                ids.append(rng.choice(plain[:40] if rng.random() < 0.3 else plain))
        cases.append(ids)
    diff = [ids for ids in cases if ours.decode(ids) != sp.decode(ids)]
    report(f"{name}: decode of random ids", len(cases), diff)
    with pytest.raises(errors.NotFound):
        ours.decode([sp.get_piece_size()])
