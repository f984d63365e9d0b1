"""Benchmarks behind ``outboard bench``: peers run side by side in one run, distinct payloads,
percentiles, correctness checked on the timed data. harness.py runs declared suites; report.py
renders and compares their runs."""

from __future__ import annotations

import importlib
from types import ModuleType

#: Suite name -> module (in this package) that declares it.
SUITES = {"channel": "channel", "rdma": "rdma", "tokenizer": "tokenizer", "tokenize": "tokenize", "graph": "graph"}


def suite_module(name: str) -> ModuleType:
    if name not in SUITES:
        raise ValueError(f"unknown benchmark suite '{name}' (known: {', '.join(sorted(SUITES))})")
    return importlib.import_module(f"{__name__}.{SUITES[name]}")
