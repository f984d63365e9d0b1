"""Reference tokenizers for the exactness gate: tiktoken and HF tokenizers (test-only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import outboard
from outboard import vocab

from outboard import corpus

R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def derive_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Each token's merge: BPE its bytes with only smaller ranks; it ends in exactly two parts."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        parts = [token[i:i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best, best_rank = None, rank
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < best_rank:
                    best, best_rank = i, r
            assert best is not None, token
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        merges.append((parts[0], parts[1]))
    return merges


@pytest.fixture(scope="session")
def gpt2_path() -> Path:
    return vocab.fetch("gpt2", quiet=True)


@pytest.fixture(scope="session")
def ours(gpt2_path: Path) -> outboard.Tokenizer:
    return outboard.Tokenizer.from_tiktoken(gpt2_path)


@pytest.fixture(scope="session")
def ranks(gpt2_path: Path) -> dict[bytes, int]:
    from tiktoken.load import load_tiktoken_bpe

    return load_tiktoken_bpe(str(gpt2_path), expected_hash=vocab.SOURCES["gpt2"].sha256)


@pytest.fixture(scope="session")
def tiktoken_gpt2(ranks: dict[bytes, int]):
    import tiktoken

    return tiktoken.Encoding("r50k_base", pat_str=R50K_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


@pytest.fixture(scope="session")
def gpt2_files(ranks: dict[bytes, int], tmp_path_factory) -> tuple[Path, Path]:
    """GPT-2's vocab.json and merges.txt, derived from the ranks (byte-identical to OpenAI's)."""
    enc = bytes_to_unicode()
    to_text = lambda b: "".join(enc[x] for x in b)  # noqa: E731
    d = tmp_path_factory.mktemp("gpt2")
    vocab_json = {to_text(t): r for t, r in ranks.items()}
    vocab_json["<|endoftext|>"] = 50256
    (d / "vocab.json").write_text(json.dumps(vocab_json, ensure_ascii=False))
    lines = ["#version: 0.2"] + [f"{to_text(a)} {to_text(b)}" for a, b in derive_merges(ranks)]
    (d / "merges.txt").write_text("\n".join(lines) + "\n")
    return d / "vocab.json", d / "merges.txt"


@pytest.fixture(scope="session")
def hf_gpt2(gpt2_files: tuple[Path, Path]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(str(gpt2_files[0]), str(gpt2_files[1])))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # trap 1: the default is True
    tok.decoder = decoders.ByteLevel()
    tok.no_padding()
    tok.no_truncation()
    return tok


@pytest.fixture(scope="session")
def docs() -> list[str]:
    return corpus.build()
