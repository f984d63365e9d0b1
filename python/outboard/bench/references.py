"""The byte-level BPE encodings (GPT-2's r50k, cl100k, o200k, Tekken) and SentencePiece BPE as the peers load
them: tiktoken, HF tokenizers (built offline as a converter would), sentencepiece, mistral-common, fastokens,
gigatoken, riptoken, toktok, quicktok and bpe-openai, from the same cached vocabulary file (toktok, quicktok and
bpe-openai bring their own copies). Used by the benchmark and the exactness tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
ENDOFTEXT = {"<|endoftext|>": 50256}
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"""
                  r"""\s*[\r\n]|\s+(?!\S)|\s""")
CL100K_SPECIALS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                   "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}

O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+"""])
O200K_SPECIALS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


@dataclass(frozen=True)
class Encoding:
    """A tiktoken encoding: our model name's vocabulary file, pattern and special tokens."""
    name: str
    vocab: str  #: outboard.vocab name of the ranks file
    pattern: str
    specials: dict[str, int]
    explicit_n_vocab: int | None  #: tiktoken's check of the ranks' count (none where ids leave gaps)
    gigatoken: str  #: gigatoken's pretokenizer name


ENCODINGS = {"gpt2": Encoding("r50k_base", "gpt2", R50K_PATTERN, ENDOFTEXT, 50257, "gpt2"),
             "cl100k": Encoding("cl100k_base", "cl100k_base", CL100K_PATTERN, CL100K_SPECIALS, None, "cl100k"),
             "o200k": Encoding("o200k_base", "o200k_base", O200K_PATTERN, O200K_SPECIALS, None, "o200k")}


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


def write_vocab_merges(ranks: dict[bytes, int], directory: Path, *, name: str = "",
                       specials: dict[str, int] = ENDOFTEXT) -> tuple[Path, Path]:
    """vocab.json and merges.txt (``name``-prefixed) derived from tiktoken ranks; for GPT-2's ranks and
    special token, byte-identical to OpenAI's."""
    enc = bytes_to_unicode()
    to_text = lambda b: "".join(enc[x] for x in b)  # noqa: E731
    vocab = {to_text(t): r for t, r in ranks.items()}
    vocab.update(specials)
    paths = directory / f"{name}vocab.json", directory / f"{name}merges.txt"
    paths[0].write_text(json.dumps(vocab, ensure_ascii=False))
    lines = ["#version: 0.2"] + [f"{to_text(a)} {to_text(b)}" for a, b in derive_merges(ranks)]
    paths[1].write_text("\n".join(lines) + "\n")
    return paths


def tiktoken_encoding(model: str, ranks: dict[bytes, int]) -> Any:
    import tiktoken

    e = ENCODINGS[model]
    return tiktoken.Encoding(e.name, pat_str=e.pattern, mergeable_ranks=ranks, special_tokens=dict(e.specials),
                             explicit_n_vocab=e.explicit_n_vocab)


def hf_gpt2(vocab_json: Path, merges_txt: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE.from_file(str(vocab_json), str(merges_txt)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # trap 1: the default is True
    tok.decoder = decoders.ByteLevel()
    tok.no_padding()
    tok.no_truncation()
    return tok


def hf_tiktoken(model: str, ranks_path: Path, directory: Path) -> Any:
    """HF tokenizers with a tiktoken encoding's pattern and its ranks as BPE merges (derived once into
    ``directory``): the tokenizer.json a converter would build, offline."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab_json, merges_txt = directory / f"{model}-vocab.json", directory / f"{model}-merges.txt"
    if not merges_txt.exists():
        write_vocab_merges(load_ranks(ranks_path), directory, name=f"{model}-", specials={})
    tok = Tokenizer(models.BPE.from_file(str(vocab_json), str(merges_txt)))
    # Oniguruma reads "{1,3}+" as "{1,3}, one or more times", not possessive: the same pattern without it.
    pattern = ENCODINGS[model].pattern.replace("{1,3}+", "{1,3}")
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.no_padding()
    tok.no_truncation()
    return tok


def fastokens_encoding(model: str, ranks_path: Path) -> Any:
    import fastokens

    e = ENCODINGS[model]
    return fastokens.Tokenizer.from_tiktoken(str(ranks_path), pattern=e.pattern, special_tokens=dict(e.specials))


def gigatoken_encoding(model: str, ranks_path: Path) -> Any:
    import gigatoken

    return gigatoken.Tokenizer.from_tiktoken(str(ranks_path), pretokenizer=ENCODINGS[model].gigatoken)


def riptoken_encoding(model: str, ranks: dict[bytes, int]) -> Any:
    import riptoken

    return riptoken.CoreBPE(ranks, {}, ENCODINGS[model].pattern)


def hf_tekken(path: Path, directory: Path) -> Any:
    """HF tokenizers with a Tekken file's pattern and ranks (its ids after the special ones, as many as
    mistral-common keeps), derived once into ``directory``: the tokenizer.json a converter would build."""
    import base64

    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    config = json.loads(path.read_text(encoding="utf-8"))
    settings, specials = config["config"], config["config"]["default_num_special_tokens"]
    vocab_json, merges_txt = directory / "tekken-vocab.json", directory / "tekken-merges.txt"
    if not merges_txt.exists():
        kept = config["vocab"][:settings["default_vocab_size"] - specials]
        ranks = {base64.b64decode(e["token_bytes"]): e["rank"] + specials for e in kept}
        write_vocab_merges(ranks, directory, name="tekken-", specials={})
    tok = Tokenizer(models.BPE.from_file(str(vocab_json), str(merges_txt)))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(settings["pattern"]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.no_padding()
    tok.no_truncation()
    return tok


def hf_sentencepiece(path: Path) -> Any:
    """HF tokenizers on a SentencePiece BPE ``.model`` as transformers' Llama converter builds it: the
    pieces as the vocabulary, merges from every split of a piece into two pieces ordered by the merged
    piece's score, byte fallback, and the "▁" normalizer (the dummy prefix, spaces as "▁")."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    sp = sentencepiece(path)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for piece, i in vocab.items():
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i):
            continue
        local = [(piece[:k], piece[k:], sp.get_score(i)) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
    merges.sort(key=lambda m: m[2], reverse=True)
    model = models.BPE(vocab, [(a, b) for a, b, _ in merges], unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.no_padding()
    tok.no_truncation()
    return tok


def tekken(path: Path) -> Any:
    """mistral-common's own Tekkenizer (the reference for Tekken's ids)."""
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    return Tekkenizer.from_file(str(path))


def sentencepiece(path: Path) -> Any:
    """The sentencepiece library on a ``.model`` file (the reference for SentencePiece ids)."""
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(path))


def toktok_encoding(model: str) -> Any:
    """toktok-rs: cl100k and o200k compiled in."""
    import toktok

    return toktok._Tokenizer(ENCODINGS[model].name, "")


def quicktok_encoding(model: str) -> Any:
    """quicktok-v1: cl100k and o200k bundled."""
    import quicktok

    return quicktok.Tokenizer(ENCODINGS[model].name, "")


def bpe_openai_encoding(model: str) -> Any:
    """bpe-openai (github/rust-gems' linear-time exact BPE, tiktoken's API): cl100k and o200k bundled."""
    import bpe_openai

    return bpe_openai.get_encoding(ENCODINGS[model].name)
