"""Layers point only downward: util <- transport <- channel <- services <- agent;
tokenize and graph are standalone libraries on util."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORDER = ["util", "transport", "channel", "services", "agent"]
STANDALONE = ["tokenize", "graph"]
# What each public header belongs to, for includes of "outboard/<x>.h".
PUBLIC = {"status": "util", "log": "util", "config": "util", "clock": "util", "stats": "util",
          "checksum": "util", "affinity": "util", "channel": "channel", "service": "services",
          "agent": "agent", "tokenizer": "tokenize", "tokenize_client": "services", "graph": "graph",
          "graph_offload": "services"}


def layer_of(include: str) -> str | None:
    m = re.match(r"outboard/(\w+)\.h", include)
    if m:
        return PUBLIC.get(m.group(1))
    m = re.match(r"(\w+)/", include)
    return m.group(1) if m and m.group(1) in ORDER + STANDALONE else None


def test_no_layer_includes_a_higher_one() -> None:
    violations = []
    for layer in ORDER:
        for f in (ROOT / "src" / layer).rglob("*.[ch]*"):
            for inc in re.findall(r'#include "([^"]+)"', f.read_text()):
                target = layer_of(inc)
                if target in ORDER and ORDER.index(target) > ORDER.index(layer):
                    violations.append(f"{f.relative_to(ROOT)} includes {inc} ({target})")
    assert violations == []


def test_standalone_libraries_depend_only_on_util() -> None:
    bad = []
    for lib in STANDALONE:
        for f in (ROOT / "src" / lib).rglob("*.[ch]*"):
            for inc in re.findall(r'#include "([^"]+)"', f.read_text()):
                if layer_of(inc) not in (None, "util", lib):
                    bad.append(f"{f.relative_to(ROOT)} includes {inc}")
    assert bad == []


def test_only_transport_includes_ucx() -> None:
    offenders = [str(f.relative_to(ROOT)) for f in (ROOT / "src").rglob("*.[ch]*")
                 if "<ucp/" in f.read_text() and f.parent.name != "transport"]
    offenders += [str(f.relative_to(ROOT)) for f in (ROOT / "include").rglob("*.h") if "<ucp/" in f.read_text()]
    assert offenders == []
