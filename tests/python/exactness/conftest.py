"""Reference tokenizers for the exactness gate: tiktoken, mistral-common, sentencepiece and HF tokenizers
(test-only)."""

from __future__ import annotations

from collections.abc import Callable
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


class Family:
    """A BPE family next to its reference: ``ours`` and ``reference`` map text to ids; ``vocab`` names its file."""

    def __init__(self, name: str, vocab: str, ours: outboard.Tokenizer, reference: Callable[[str], list[int]],
                 reference_ordinary: Callable[[str], list[int]]) -> None:
        self.name, self.vocab, self.ours, self.reference = name, vocab, ours, reference
        self.reference_ordinary = reference_ordinary  # the same ids, cheaper per call (the code-point sweep)


def _family(name: str) -> Family:
    if name == "tekken":
        tekken = references.tekken(vocab.fetch("tekken", quiet=True)[0])
        inner, offset = tekken._model, tekken.num_special_tokens  # the tiktoken Encoding Tekkenizer.encode runs
        return Family(name, name, outboard.Tokenizer.tekken(), lambda s: tekken.encode(s, bos=False, eos=False),
                      lambda s: [t + offset for t in inner.encode_ordinary(s)])
    if name.startswith("mistral-"):
        path = vocab.fetch(name, quiet=True)[0]
        sp = references.sentencepiece(path)
        return Family(name, name, outboard.Tokenizer.from_sentencepiece(path), sp.encode, sp.encode)
    encoding = references.ENCODINGS[name]
    path = vocab.fetch(encoding.vocab, quiet=True)[0]
    tik = references.tiktoken_encoding(name, references.load_ranks(path))
    return Family(name, encoding.vocab, outboard.Tokenizer.from_tiktoken(path, pattern=name), tik.encode_ordinary,
                  tik.encode_ordinary)


@pytest.fixture(scope="session", params=["cl100k", "o200k", "tekken", "mistral-v1", "mistral-v3"])
def family(request: pytest.FixtureRequest) -> Family:
    return _family(request.param)


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
