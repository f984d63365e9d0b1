"""Exact tokenizers (byte-level BPE as tiktoken's r50k, cl100k and o200k and Mistral's Tekken, SentencePiece BPE, BERT WordPiece),
numpy out, native speed.

    tok = outboard.Tokenizer.gpt2()
    ids = tok.encode("Hello world")          # np.ndarray[int32]: [15496, 995]
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Literal, Union, get_args

import numpy as np

from . import _core, vocab
from .errors import InvalidArgument

Text = Union[str, bytes]
DEFAULT_CACHE_BYTES: int = _core.DEFAULT_PIECE_CACHE_BYTES
Utf8Policy = Literal["strict", "replace"]
Pattern = Literal["r50k", "cl100k", "o200k"]


class Tokenizer:
    """Immutable; safe to use from several threads (the GIL is released while encoding)."""

    def __init__(self, core: _core.Tokenizer) -> None:
        self._core = core

    @classmethod
    def from_tiktoken(cls, path: str | Path, *, special_tokens: dict[str, int] | None = None,
                      pattern: Pattern = "r50k") -> Tokenizer:
        """A ``.tiktoken`` rank file with tiktoken's r50k (GPT-2), cl100k or o200k pre-tokenizer; special
        tokens default to that encoding's."""
        if pattern not in get_args(Pattern):
            raise InvalidArgument(f"pattern '{pattern}' is not one of {', '.join(get_args(Pattern))}")
        specials = list((special_tokens or {}).items())
        return cls(_core.Tokenizer.from_tiktoken(str(path), specials, getattr(_core.Pretokenizer, pattern)))

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        """A vocabulary file read as its name says: ``*.tiktoken`` (cl100k's or o200k's pre-tokenizer when the
        name starts with ``cl100k`` or ``o200k``, r50k's otherwise), ``tekken*.json``, another tokenizer
        ``*.json``, a WordPiece ``*.txt`` or a SentencePiece ``*.model`` (``*.model.v3``)."""
        return cls(_core.Tokenizer.from_file(str(path)))

    @classmethod
    def from_tekken_json(cls, path: str | Path) -> Tokenizer:
        """Mistral's Tekken (``tekken_*.json``): the ids of mistral-common's ``Tekkenizer.encode``. Special-token
        text is ordinary text, as there; ``add_special_tokens=True`` prepends BOS; decoding drops control
        ids, as ``Tekkenizer.decode`` does by default."""
        return cls(_core.Tokenizer.from_tekken_json(str(path)))

    @classmethod
    def from_sentencepiece(cls, path: str | Path) -> Tokenizer:
        """A SentencePiece BPE ``.model`` with byte fallback (Llama 2, Mistral 7B): the ids of sentencepiece's
        ``encode``. Control-token text is ordinary text, as there; ``add_special_tokens=True`` prepends BOS.
        Decoding drops control ids and the first piece's leading space, as sentencepiece does."""
        return cls(_core.Tokenizer.from_sentencepiece(str(path)))

    @classmethod
    def from_files(cls, vocab_json: str | Path, merges_txt: str | Path) -> Tokenizer:
        """GPT-2 style ``vocab.json`` + ``merges.txt``."""
        return cls(_core.Tokenizer.from_vocab_merges(str(vocab_json), str(merges_txt)))

    @classmethod
    def from_tokenizer_json(cls, path: str | Path) -> Tokenizer:
        """An HF tokenizer.json (WordPiece+BertNormalizer, or BPE+ByteLevel); padding and truncation are
        reported in ``config`` and not applied."""
        return cls(_core.Tokenizer.from_tokenizer_json(str(path)))

    @classmethod
    def bert_wordpiece(cls, vocab_txt: str | Path, *, lowercase: bool = True,
                       strip_accents: bool | None = None) -> Tokenizer:
        """BERT WordPiece from vocab.txt; ``strip_accents`` follows ``lowercase`` unless given."""
        return cls(_core.Tokenizer.bert_wordpiece(str(vocab_txt), lowercase,
                                                  -1 if strip_accents is None else int(strip_accents)))

    @classmethod
    def gpt2(cls) -> Tokenizer:
        """GPT-2 (r50k) from the vocabulary cache (``outboard vocab fetch``)."""
        return cls.from_tiktoken(vocab.path("gpt2"))

    @classmethod
    def cl100k_base(cls) -> Tokenizer:
        """cl100k_base (GPT-3.5/4) from the vocabulary cache, with tiktoken's special tokens."""
        return cls.from_tiktoken(vocab.path("cl100k_base"), pattern="cl100k")

    @classmethod
    def o200k_base(cls) -> Tokenizer:
        """o200k_base (GPT-4o) from the vocabulary cache, with tiktoken's special tokens."""
        return cls.from_tiktoken(vocab.path("o200k_base"), pattern="o200k")

    @classmethod
    def tekken(cls) -> Tokenizer:
        """Mistral NeMo's Tekken (tekken_240911.json) from the vocabulary cache."""
        return cls.from_tekken_json(vocab.path("tekken"))

    @classmethod
    def mistral_v1(cls) -> Tokenizer:
        """Mistral 7B v0.1's SentencePiece BPE (tokenizer.model.v1) from the vocabulary cache."""
        return cls.from_sentencepiece(vocab.path("mistral-v1"))

    @classmethod
    def mistral_v3(cls) -> Tokenizer:
        """Mistral 7B v0.3's SentencePiece BPE with its control tokens (``[INST]``, tools) from the cache."""
        return cls.from_sentencepiece(vocab.path("mistral-v3"))

    @classmethod
    def bert_base_uncased(cls) -> Tokenizer:
        """bert-base-uncased WordPiece from the vocabulary cache."""
        return cls.bert_wordpiece(vocab.path("bert-base-uncased"), lowercase=True)

    @property
    def config(self) -> dict:
        """Settings of the loaded file that are reported, not applied (padding, truncation)."""
        import json

        report = self._core.config_report
        return json.loads(report) if report else {}

    def with_cache(self, max_bytes: int) -> Tokenizer:
        """The same vocabulary with a pre-token cache (piece -> ids) of its own of at most ``max_bytes``
        (0, or under the 832 B the least cache takes: none). Every tokenizer starts with one of
        ``DEFAULT_CACHE_BYTES``; ids never depend on it."""
        return Tokenizer(self._core.with_piece_cache(max_bytes))

    @property
    def cache_bytes(self) -> int:
        """The memory the pre-token cache may use (0: no cache)."""
        return self._core.piece_cache_bytes

    @property
    def vocab_size(self) -> int:
        return self._core.vocab_size

    @property
    def eot_token(self) -> int:
        return self._core.special_id("<|endoftext|>")

    @staticmethod
    def unicode_version() -> str:
        return _core.Tokenizer.unicode_version()

    def encode(self, text: Text, *, allowed_special: Literal["all"] | Collection[str] = (),
               utf8: Utf8Policy = "strict", add_special_tokens: bool = False) -> np.ndarray:
        """Token ids. Special-token text is an error unless listed in ``allowed_special`` (as tiktoken);
        ``add_special_tokens`` wraps WordPiece output in [CLS] ... [SEP] and starts Tekken's with BOS."""
        return self._core.encode(text, allow_special=self._allow(allowed_special), utf8=utf8,
                                 add_special_tokens=add_special_tokens)

    def encode_ordinary(self, text: Text, *, utf8: Utf8Policy = "strict") -> np.ndarray:
        """Token ids, treating special-token text as ordinary text."""
        return self._core.encode(text, ordinary=True, utf8=utf8)

    def encode_batch(self, texts: Sequence[Text], *, allowed_special: Literal["all"] | Collection[str] = (),
                     utf8: Utf8Policy = "strict", num_threads: int = 1, flat: bool = False,
                     ) -> list[np.ndarray] | tuple[np.ndarray, np.ndarray]:
        """Ids per text; ``flat=True`` gives (ids, offsets) with text i at ids[offsets[i]:offsets[i+1]]."""
        ids, offsets = self._core.encode_batch(list(texts), allow_special=self._allow(allowed_special), utf8=utf8,
                                               threads=num_threads)
        if flat:
            return ids, offsets
        return [ids[offsets[i]:offsets[i + 1]] for i in range(len(texts))]

    def count(self, text: Text, *, utf8: Utf8Policy = "strict") -> int:
        return len(self.encode_ordinary(text, utf8=utf8))

    def decode_bytes(self, ids: Sequence[int] | np.ndarray) -> bytes:
        return self._core.decode(np.ascontiguousarray(ids, dtype=np.int32))

    def decode(self, ids: Sequence[int] | np.ndarray, *, errors: str = "replace") -> str:
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def decode_stream(self) -> DecodeStream:
        """Decoding as ids arrive (a server streaming generated text); see DecodeStream."""
        return DecodeStream(self)

    def _allow(self, allowed: Literal["all"] | Collection[str]) -> bool:
        if allowed == "all":
            return True
        unknown = [s for s in allowed if self._core.special_id(s) < 0]
        if unknown:
            raise InvalidArgument(f"not special tokens of this vocabulary: {unknown}")
        return bool(allowed)


class DecodeStream:
    """Text as ids stream in: ``step(ids)`` returns what they complete, holding back the bytes of a
    character later ids may finish; ``finish()`` returns the rest (ill-formed bytes as U+FFFD) and starts
    a new sequence. All the steps and finish() together equal ``decode(all_ids)``. One per sequence."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._core = _core.DecodeStream(tokenizer._core)

    def step(self, ids: Sequence[int] | np.ndarray | int) -> str:
        return self._core.step(np.ascontiguousarray(np.atleast_1d(ids), dtype=np.int32))

    def finish(self) -> str:
        return self._core.finish()

    @property
    def pending_bytes(self) -> int:
        """Bytes held back: a character begun and not ended (at most 3)."""
        return self._core.pending_bytes
