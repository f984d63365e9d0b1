#!/usr/bin/env python3
"""Generates the Unicode class table the tokenizers scan with.

The table is committed (src/tokenize/unicode_tables.inc), so a build needs
neither this script nor its inputs: `pip install .` works from an sdist with
the system packages alone. `make test` runs it with --check, which regenerates
the table and fails unless the result is byte for byte the committed file.
The Unicode version is pinned by the `unicodedata2` package version
(scripts/bootstrap.sh), not by whatever Python runs this.

Three bits serve only BERT WordPiece and follow what HF tokenizers does:
punctuation, control (Cc Cf Co Cs) and nonspacing mark come from the
Unicode 8.0 categories of HF's `unicode_categories` crate, not from 16.0
(characters assigned since are ordinary letters to HF). Those categories are
read from the database header inside the unicodedata2 8.0.0 source
distribution (the one argument), which bootstrap.sh downloads from PyPI.

Output: two-stage tables of uint8 flags per code point, the classes and the
case classes o200k-style patterns use (see src/tokenize/unicode.h for the
bits), and sorted mapping tables for the
canonical decomposition (NFD, from unicodedata2) and full lowercase mapping
of each code point that has one. Lowercase comes from the generating Python's
str.lower(), whose Unicode version (printed in the header) may trail the
pinned one by a release or two: only characters new in those releases can
differ; --check is skipped (exit 3, naming both versions) under a Python
whose Unicode version is not the one the committed file records.
"""

from __future__ import annotations

import argparse
import re
import sys
import tarfile
import unicodedata
from pathlib import Path

import unicodedata2 as ud

PINNED = "16.0.0"
LOWERCASE_FROM = "Lowercase mappings from Python's str.lower(), Unicode "
COMMITTED = Path(__file__).resolve().parent.parent / "src" / "tokenize" / "unicode_tables.inc"

LETTER, NUMBER, SPACE, PUNCT, MARK_NONSPACING, CONTROL, CJK = 1, 2, 4, 8, 16, 32, 64
# [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]: o200k's and Tekken's word classes.
UPPERISH, LOWERISH = 1, 2
BERT_UNICODE = "8.0.0"

# The White_Space property (PropList.txt), stable since Unicode 6.3: what
# \s means in the regex engines tiktoken and HF use.
WHITE_SPACE = [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
               0x202F, 0x205F, 0x3000]

# BERT's CJK ranges as HF tokenizers has them: its sixth range starts at
# 0x2B920, where Google's BasicTokenizer._is_chinese_char has 0x2B820.
CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]


def legacy_categories(sdist: str) -> list[str]:
    """Per code point category from CPython-style unicodedata_db.h in a unicodedata2 sdist."""
    with tarfile.open(sdist) as t:
        member = next(m for m in t.getmembers() if m.name.endswith("unicodedata_db.h"))
        src = t.extractfile(member).read().decode()
    version = re.search(r'#define UNIDATA_VERSION "([\d.]+)"', src).group(1)
    if version != BERT_UNICODE:
        sys.exit(f"gen_unicode_tables: {sdist} holds Unicode {version}, expected {BERT_UNICODE}")

    def array(name: str) -> list[str]:
        body = re.search(name + r"\[\] = \{(.*?)\};", src, re.S).group(1)
        return body

    records = [int(r.split(",")[0]) for r in re.findall(r"\{([^{}]*)\}", array("_PyUnicode_Database_Records"))]
    names = re.findall(r'"(\w+)"', array("_PyUnicode_CategoryNames"))
    index1 = [int(x) for x in array("index1").replace("\n", "").split(",") if x.strip()]
    index2 = [int(x) for x in array("index2").replace("\n", "").split(",") if x.strip()]
    shift = int(re.search(r"#define SHIFT (\d+)", src).group(1))
    cats = []
    for cp in range(0x110000):
        i = index1[cp >> shift]
        cats.append(names[records[index2[(i << shift) + (cp & ((1 << shift) - 1))]]])
    return cats


def flags(cp: int, ws: set[int], bert_cat: str) -> int:
    cat = ud.category(chr(cp))
    f = 0
    if cat[0] == "L":
        f |= LETTER
    if cat[0] == "N":
        f |= NUMBER
    if cp in ws:
        f |= SPACE
    if bert_cat[0] == "P":
        f |= PUNCT
    if bert_cat == "Mn":
        f |= MARK_NONSPACING
    if bert_cat in ("Cc", "Cf", "Co", "Cs"):
        f |= CONTROL
    if any(lo <= cp <= hi for lo, hi in CJK_RANGES):
        f |= CJK
    return f


def case_flags(cp: int) -> int:
    cat = ud.category(chr(cp))
    return ((UPPERISH if cat in ("Lu", "Lt", "Lm", "Lo") or cat[0] == "M" else 0)
            | (LOWERISH if cat in ("Ll", "Lm", "Lo") or cat[0] == "M" else 0))


def two_stage(name: str, value) -> str:
    """A two-stage table of uint8 per code point: 256-entry blocks, shared where equal."""
    blocks: dict[bytes, int] = {}
    stage1: list[int] = []
    stage2: list[bytes] = []
    for hi in range(0x110000 >> 8):
        block = bytes(value((hi << 8) | lo) for lo in range(256))
        if block not in blocks:
            blocks[block] = len(stage2)
            stage2.append(block)
        stage1.append(blocks[block])
    return "".join([
        f"constexpr uint16_t k{name}Stage1[{len(stage1)}] = {{" + ",".join(map(str, stage1)) + "};\n",
        f"constexpr uint8_t k{name}Stage2[{len(stage2) * 256}] = {{\n",
        *(",".join(map(str, b)) + ",\n" for b in stage2),
        "};\n",
    ])


def _mapping_table(name: str, mapping: dict[int, str]) -> str:
    keys = sorted(mapping)
    pool: list[int] = []
    rows = []
    for cp in keys:
        seq = [ord(c) for c in mapping[cp]]
        rows.append(f"{{{cp},{len(pool)},{len(seq)}}}")
        pool.extend(seq)
    return (f"constexpr MappingEntry k{name}[{len(rows)}] = {{" + ",".join(rows) + "};\n"
            f"constexpr char32_t k{name}Pool[{len(pool)}] = {{" + ",".join(map(str, pool)) + "};\n")


def mappings() -> str:
    nfd, lower = {}, {}
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        d = ud.normalize("NFD", c)
        if d != c:
            nfd[cp] = d
        lo = c.lower()
        if lo != c:
            lower[cp] = lo
    return _mapping_table("Decomposition", nfd) + _mapping_table("Lowercase", lower)


def render(bert_sdist: str) -> str:
    if ud.unidata_version != PINNED:
        sys.exit(f"gen_unicode_tables: unicodedata2 provides Unicode {ud.unidata_version}, pinned {PINNED}")
    ws = set(WHITE_SPACE)
    bert = legacy_categories(bert_sdist)
    return "".join([
        f"// Generated by scripts/gen_unicode_tables.py from Unicode {PINNED}. Do not edit.\n",
        f'constexpr char kUnicodeVersion[] = "{PINNED}";\n',
        f"// Punctuation, control and nonspacing-mark bits: Unicode {BERT_UNICODE} (HF's BERT).\n",
        two_stage("Class", lambda cp: flags(cp, ws, bert[cp])),
        two_stage("Case", case_flags),
        f"// {LOWERCASE_FROM}{unicodedata.unidata_version}.\n",
        mappings(),
    ])


def check(bert_sdist: str) -> int:
    committed = COMMITTED.read_text()
    recorded = re.search(re.escape(LOWERCASE_FROM) + r"([\d.]+)\.", committed)
    if recorded is None or recorded.group(1) != unicodedata.unidata_version:
        print(f"gen_unicode_tables: {COMMITTED.name} records lowercase mappings from Unicode "
              f"{recorded.group(1) if recorded else '?'}; this Python has {unicodedata.unidata_version}: not checked")
        return 3
    fresh = render(bert_sdist)
    if fresh == committed:
        return 0
    old, new = committed.splitlines(), fresh.splitlines()
    line = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    print(f"gen_unicode_tables: {COMMITTED} differs from a regeneration at line {line + 1} "
          f"({len(committed)} against {len(fresh)} bytes): rerun scripts/gen_unicode_tables.py and commit it")
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bert_sdist", help="the unicodedata2 8.0.0 sdist (.venv/share/outboard/, from bootstrap.sh)")
    parser.add_argument("--check", action="store_true", help=f"compare with {COMMITTED.name}; write nothing")
    parser.add_argument("--out", type=Path, default=COMMITTED)
    args = parser.parse_args()
    if args.check:
        return check(args.bert_sdist)
    args.out.write_text(render(args.bert_sdist))
    return 0


if __name__ == "__main__":
    sys.exit(main())
