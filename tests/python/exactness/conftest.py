"""Reference tokenizers for the exactness gate: tiktoken (r50k, cl100k) and HF tokenizers (test-only)."""

from __future__ import annotations

from pathlib import Path

import pytest

import outboard
from outboard import corpus, vocab
from outboard.bench import references


@pytest.fixture(scope="session")
def gpt2_path() -> Path:
    return vocab.fetch("gpt2", quiet=True)[0]


@pytest.fixture(scope="session")
def ours(gpt2_path: Path) -> outboard.Tokenizer:
    return outboard.Tokenizer.from_tiktoken(gpt2_path)


@pytest.fixture(scope="session")
def ranks(gpt2_path: Path) -> dict[bytes, int]:
    return references.load_ranks(gpt2_path)


@pytest.fixture(scope="session")
def tiktoken_gpt2(ranks: dict[bytes, int]):
    return references.tiktoken_encoding("gpt2", ranks)


@pytest.fixture(scope="session")
def gpt2_files(ranks: dict[bytes, int], tmp_path_factory) -> tuple[Path, Path]:
    return references.write_vocab_merges(ranks, tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="session")
def hf_gpt2(gpt2_files: tuple[Path, Path]):
    return references.hf_gpt2(*gpt2_files)


@pytest.fixture(scope="session")
def cl100k_path() -> Path:
    return vocab.fetch("cl100k_base", quiet=True)[0]


@pytest.fixture(scope="session")
def cl100k(cl100k_path: Path) -> outboard.Tokenizer:
    return outboard.Tokenizer.from_tiktoken(cl100k_path, pattern="cl100k")


@pytest.fixture(scope="session")
def tiktoken_cl100k(cl100k_path: Path):
    return references.tiktoken_encoding("cl100k", references.load_ranks(cl100k_path))


@pytest.fixture(scope="session")
def docs() -> list[str]:
    return corpus.build()


@pytest.fixture(scope="session")
def bert_ours() -> outboard.Tokenizer:
    return outboard.Tokenizer.bert_wordpiece(vocab.fetch("bert-base-uncased", quiet=True)[0], lowercase=True)


@pytest.fixture(scope="session")
def bert_hf():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(vocab.fetch("bert-base-uncased-json", quiet=True)[0]))
    tok.no_padding()  # trap 9: the shipped file pads and truncates to 128
    tok.no_truncation()
    return tok
