"""Exactness gate: BERT WordPiece (uncased) ids identical to HF tokenizers. 0 differences passes."""

from __future__ import annotations

import pytest

import outboard
from outboard import vocab
from outboard.bench import gate

from .test_gpt2_exact import report

CONTEXTS, TRAPS = gate.WORDPIECE_CONTEXTS, gate.WORDPIECE_TRAPS


def hf_ids(tok, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def test_corpus_matches_hf(bert_ours, bert_hf, docs) -> None:
    mine = bert_ours.encode_batch(docs, num_threads=2, allowed_special="all")
    ref = hf_ids(bert_hf, docs)
    diff = [i for i in range(len(docs)) if mine[i].tolist() != ref[i]]
    size = sum(len(d.encode()) for d in docs)
    report(f"WordPiece corpus vs HF ({len(docs)} documents, {size / 1e6:.2f} MB)", len(docs), diff)


# HF classifies BERT's punctuation, control and nonspacing marks with Unicode 8.0 categories and
# starts a CJK range at 0x2B920: both reproduced (scripts/gen_unicode_tables.py), so every code
# point must agree.
def test_every_code_point_in_contexts_matches_hf(bert_ours, bert_hf) -> None:
    cps = gate.code_points()
    strings = [ctx(c) for ctx in CONTEXTS for c in cps]
    ids, offsets = bert_ours.encode_batch(strings, num_threads=2, flat=True, allowed_special="all")
    ref = hf_ids(bert_hf, strings)
    diff = [f"U+{ord(s[1]) if len(s) > 1 else ord(s[0]):04X} {s!r}" for i, s in enumerate(strings)
            if ids[offsets[i]:offsets[i + 1]].tolist() != ref[i]]
    report(f"WordPiece all code points x {len(CONTEXTS)} contexts vs HF", len(strings), diff)


@pytest.mark.parametrize("text", TRAPS, ids=lambda t: repr(t[:20]))
def test_named_traps_match_hf(bert_ours, bert_hf, text: str) -> None:
    assert bert_ours.encode(text, allowed_special="all").tolist() == \
        bert_hf.encode(text, add_special_tokens=False).ids


def test_hundred_character_word_limit(bert_ours) -> None:
    unk = 100
    assert bert_ours.encode("a" * 100).tolist() != [unk]
    assert bert_ours.encode("a" * 101).tolist() == [unk]


def test_cls_sep_and_special_policy(bert_ours, bert_hf) -> None:
    text = "Hello world"
    assert bert_ours.encode(text, add_special_tokens=True).tolist() == bert_hf.encode(text).ids
    with pytest.raises(outboard.errors.InvalidArgument):
        bert_ours.encode("a [SEP] b")


def test_tokenizer_json_loads_to_the_same_ids_and_reports_padding(bert_ours, docs) -> None:
    j = outboard.Tokenizer.from_tokenizer_json(vocab.path("bert-base-uncased-json"))
    assert j.config["padding"]["strategy"] == {"Fixed": 128} and j.config["truncation"]["max_length"] == 128
    assert j.config["applied"] is False
    sample = docs[::9]
    diff = [i for i, d in enumerate(sample)
            if j.encode(d, allowed_special="all").tolist() != bert_ours.encode(d, allowed_special="all").tolist()]
    report("tokenizer.json vs vocab.txt", len(sample), diff)
