"""GPT-2 as the peers load it: tiktoken (r50k), HF tokenizers (ByteLevel BPE) and fastokens,
built offline from the same cached ranks file. Used by the benchmark and the exactness tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = {"<|endoftext|>": 50256}


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


def load_ranks(path: Path) -> dict[bytes, int]:
    from tiktoken.load import load_tiktoken_bpe

    return load_tiktoken_bpe(str(path))


def write_vocab_merges(ranks: dict[bytes, int], directory: Path) -> tuple[Path, Path]:
    """GPT-2's vocab.json and merges.txt derived from the ranks (byte-identical to OpenAI's)."""
    enc = bytes_to_unicode()
    to_text = lambda b: "".join(enc[x] for x in b)  # noqa: E731
    vocab = {to_text(t): r for t, r in ranks.items()}
    vocab.update(ENDOFTEXT)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    lines = ["#version: 0.2"] + [f"{to_text(a)} {to_text(b)}" for a, b in derive_merges(ranks)]
    (directory / "merges.txt").write_text("\n".join(lines) + "\n")
    return directory / "vocab.json", directory / "merges.txt"


def tiktoken_gpt2(ranks: dict[bytes, int]) -> Any:
    import tiktoken

    return tiktoken.Encoding("r50k_base", pat_str=R50K_PATTERN, mergeable_ranks=ranks,
                             special_tokens=dict(ENDOFTEXT), explicit_n_vocab=50257)


def hf_gpt2(vocab_json: Path, merges_txt: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(str(vocab_json), str(merges_txt)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # trap 1: the default is True
    tok.decoder = decoders.ByteLevel()
    tok.no_padding()
    tok.no_truncation()
    return tok


def fastokens_gpt2(ranks_path: Path) -> Any:
    import fastokens

    return fastokens.Tokenizer.from_tiktoken(str(ranks_path), pattern=R50K_PATTERN, special_tokens=dict(ENDOFTEXT))


def gigatoken_gpt2(ranks_path: Path) -> Any:
    import gigatoken

    return gigatoken.Tokenizer.from_tiktoken(str(ranks_path), pretokenizer="gpt2")


def riptoken_gpt2(ranks: dict[bytes, int]) -> Any:
    import riptoken

    return riptoken.CoreBPE(ranks, {}, R50K_PATTERN)
