"""A mixed test corpus built at test time from what any machine with the test dependencies has.

English prose (pydoc topics, Python docstrings), source code (the standard
library), and text in more than ten scripts (Faker's per-locale lorem, names
and addresses: Arabic, Hebrew, Devanagari, Bengali, Thai, Korean, Japanese,
Chinese, Cyrillic, Greek, Armenian, Georgian, Persian) plus emoji. Every
document is distinct; nothing is repeated to pad the size.
"""

from __future__ import annotations

import functools
import random
import sysconfig
from pathlib import Path

MIN_BYTES = 10 * 1000 * 1000
MAX_DOC_BYTES = 64 * 1024

LOCALES = ["ar_AA", "he_IL", "hi_IN", "bn_BD", "th_TH", "ko_KR", "ja_JP", "zh_CN", "zh_TW", "ru_RU", "el_GR",
           "hy_AM", "ka_GE", "fa_IR", "uk_UA", "en_US", "de_DE", "fr_FR", "vi_VN", "tr_TR"]


def _chunks(text: str) -> list[str]:
    out, cur = [], 0
    while cur < len(text):
        out.append(text[cur:cur + MAX_DOC_BYTES])
        cur += MAX_DOC_BYTES
    return out


@functools.cache  # Faker takes seconds, and a run builds several corpora
def _multiscript(seed: int, docs: int) -> tuple[str, ...]:
    from faker import Faker

    out = []
    rng = random.Random(seed)
    for i in range(docs):
        locale = LOCALES[i % len(LOCALES)]
        fake = Faker(locale)
        fake.seed_instance(seed * 1000 + i)
        parts = []
        for _ in range(40):
            kind = rng.random()
            if kind < 0.5:
                parts.append(fake.paragraph(nb_sentences=rng.randint(2, 8)))
            elif kind < 0.7:
                parts.append(fake.address())
            elif kind < 0.85:
                parts.append(f"{fake.name()} — {fake.phone_number()} {fake.date()}")
            else:
                parts.append(" ".join(fake.emoji() for _ in range(rng.randint(1, 6))) + " " + fake.word())
        out.append(rng.choice(["\n", "\n\n", " ", "\t", "\r\n"]).join(parts))
    return tuple(out)


def build(min_bytes: int = MIN_BYTES) -> list[str]:
    """Documents whose UTF-8 size adds up to at least ``min_bytes``."""
    docs: list[str] = []
    from pydoc_data.topics import topics

    docs += [t for t in topics.values() if t]
    docs += _multiscript(seed=1, docs=600)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    total = sum(len(d.encode()) for d in docs)
    for f in sorted(stdlib.rglob("*.py")):
        if total >= min_bytes * 1.02:  # margin for the duplicates removed below
            break
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for c in _chunks(text):
            docs.append(c)
            total += len(c.encode())
    docs = list(dict.fromkeys(docs))  # distinct documents only
    total = sum(len(d.encode()) for d in docs)
    assert total >= min_bytes, f"corpus only {total} B"
    return docs
