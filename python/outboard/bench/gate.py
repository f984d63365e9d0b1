"""The exactness gate (shared/reference/tokenizers.md §8): the strings on which an implementation's ids
must equal its reference's before a speed figure of it counts. Named traps, random mixtures of the
characters where the families' patterns differ, and every code point in a few contexts.
tests/python/exactness holds Outboard to them in `make test`; `outboard bench tokenizer` runs every
peer through them (its "Exactness gate" tables), so "the fastest exact peer" means one that passed."""

from __future__ import annotations

import random
from collections.abc import Callable

SKIP_SURROGATES = range(0xD800, 0xE000)

# GPT-2 (r50k): where its pattern meets Unicode classes, contractions and whitespace runs.
GPT2_CONTEXTS: list[Callable[[str], str]] = [
    lambda c: "a" + c + "a",
    lambda c: " " + c,
    lambda c: c + "'s",
    lambda c: c + c + " x",
    lambda c: "1" + c + "\n",
    lambda c: "\t" + c + " " + c,
]
GPT2_TRAPS = [
    "DON'T don't", "\t'modified", "\n'll do", "\u00a0're here", "x\u00a0'sy", "it's 'S 'Ll",
    "a   b", "x\n\n  y", "\t\tx", "  leading", "trailing   ", "   ", "\n", " \n \n ", "a \t b", "x\r\n\r\n y",
    "12345 678901234567890", "cafe\u0301!", "ΟΔΟΣ σοφός", "\x00\x01\x1f\x7f control", "\u200b\ufeff\u180e odd",
    "\u0085next\u2028line\u2029para\u3000ideo", "a" * 100_000, "9" * 50_000, "!?" * 30_000, "ab" * 40_000 + " x",
    "日本語" * 3000, "👍🏽" * 2000, "x = {'a': [1, 2]}\n    return f'{x!r}'\n", "''s ''ll '", " 'ss", "'", "''",
]

# The BPE families after GPT-2 (cl100k, o200k, Tekken, SentencePiece): the traps sit where these patterns
# differ from r50k's and from each other: contractions in any case (and LONG S, which (?i) folds to s),
# one non-letter before a word, digits in threes (Tekken: ones), line breaks ending whitespace, o200k's
# and Tekken's upper/lower runs (Lu Lt vs Ll, with Lm Lo and marks in both), and "/" after punctuation.
BPE_CONTEXTS: list[Callable[[str], str]] = [
    lambda c: "a" + c + "a",
    lambda c: " " + c + "A",
    lambda c: c + "'s",
    lambda c: "'" + c + "x",
    lambda c: "1" + c + "\n",
    lambda c: "\n" + c + "  " + c + "1234",
]
# How many of BPE_CONTEXTS each family sweeps: Tekken shares o200k's scanner but for digits and
# contractions; Mistral v0.3 shares v0.1's pieces, at other ids.
SWEPT_CONTEXTS = {"cl100k": 6, "o200k": 6, "tekken": 3, "mistral-v1": 3, "mistral-v3": 1}
BPE_TRAPS = [
    "DON'T don't", "IT'S 'LL 'Ve 're 'D", "x'\u017fy '\u212a", "\t'modified", "\tword \u00a0word (foo) 'bar",
    "12345 678901234567890", "\u00b2\u00b3\u00bc5x \u0661\u0662\u0663\u0664", "a   b", "x\n\n  y", "trailing \n  ",
    "  \n  x", "!!!\n\nfoo", " !?\r\n", "hello\r\nworld\r\r\n", "a \t b", "\t\t1", "x \u0301y", "\u0085next\u2028line",
    "HTMLParser getHTTPResponse ABC def", "\u01c5ungla \u02b0ab \u3042A a\u0903b", "!\u0301x \u0301 x/y !!/\n/",
    "   ", "\n", "a" * 100_000, "9" * 50_000, "!?" * 30_000, "\n" * 10_000 + "x", "日本語" * 3000, "👍🏽" * 2000,
    "x = {'a': [1, 2]}\n    return f'{x!r}'\n",
    # SentencePiece: runs of spaces join last and from the left ("▁"x16 the longest piece), a literal "▁",
    # control-token text, user-defined pieces, bytes no piece holds.
    " " * 17 + "x", " " * 40, "x" + " " * 33 + "\n", "  " + " " * 64 + "1", "\u2581x \u2581\u2581 y\u2581",
    "[INST] [REFERENCE_DOC_3]x[/INST]</s>", " leading", "\x00\x01\x7f control", "\U0010ffff\u0378\U000e0001",
]
MIXTURE = "aZ9 '\t\n\r!.,/é日\u00a0\u0301\u0903\u017f\u01c5\u02b0\u3042\u2028-_(){}0sStT"
#: Random mixtures of MIXTURE's characters (1 to 300 of them) a full gate draws.
MIXTURES = 20_000

# BERT WordPiece: HF classifies punctuation, control and nonspacing marks with Unicode 8.0 categories.
WORDPIECE_CONTEXTS: list[Callable[[str], str]] = [
    lambda c: "a" + c + "a", lambda c: " " + c + "x", lambda c: "İ" + c + "ς", lambda c: c + "'s"]
WORDPIECE_TRAPS = [
    "ΟΔΟΣ", "Σ σ ς ΣΑΣ", "İstanbul ǅ ﬃ", "café naïve Ångström", "\x00a\x01b\x7fc\ufffd d", "tab\tnew\nline\rcr",
    "中文字符 and 漢字", "日本語のテキスト", "한국어 텍스트", "a" * 100, "a" * 101, "é" * 100 + " " + "é" * 101,
    "unaffable unbelievableness", "x" * 300, "¬ full－width ＡＢＣ", "[CLS] [SEP] [UNK]", "don't stop!!!", "",
    "   ", "emoji 👍🏽 and 🙂", "\u200b\u200d zero width", "ﬁ ligature", "1,234.56 €",
]


def code_points(every: int = 1) -> list[str]:
    """Every code point but the surrogates (or every `every`-th of them), as one-character strings."""
    return [chr(c) for c in range(0, 0x110000, every) if c not in SKIP_SURROGATES]


def contexts(family: str) -> list[Callable[[str], str]]:
    """The contexts `family` (gpt2, cl100k, o200k, tekken, mistral-v1, mistral-v3, bert) sweeps every code point in."""
    if family == "gpt2":
        return GPT2_CONTEXTS
    if family == "bert":
        return WORDPIECE_CONTEXTS
    return BPE_CONTEXTS[:SWEPT_CONTEXTS[family]]


def mixtures(count: int = MIXTURES) -> list[str]:
    """`count` random mixtures of MIXTURE's characters, then words of random letters up to 1 MiB."""
    rng = random.Random(7)
    cases = ["".join(rng.choice(MIXTURE) for _ in range(rng.randint(1, 300))) for _ in range(count)]
    return cases + ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)) for n in (64, 300, 5000, 1 << 20)]


def strings(family: str, every: int = 1, mixture_count: int = MIXTURES) -> dict[str, list[str]]:
    """The gate's sets for `family`, by name: its named traps, the random mixtures (byte-level and
    SentencePiece BPE), and every code point (or every `every`-th) in each of its contexts."""
    traps = GPT2_TRAPS if family == "gpt2" else WORDPIECE_TRAPS if family == "bert" else BPE_TRAPS
    sets = {"named traps": traps}
    if family != "bert":
        sets["random mixtures"] = mixtures(mixture_count)
    cps = code_points(every)
    sweep = contexts(family)
    sets[f"code points{'' if every == 1 else f' (every {every}th)'} x {len(sweep)} contexts"] = [
        ctx(c) for ctx in sweep for c in cps]
    return sets
