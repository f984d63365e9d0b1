"""Benchmarks behind ``outboard bench``: peers run side by side in one run, distinct payloads,
percentiles, correctness checked on the timed data. Every suite declares a ``SUITE``
(declare.py) in a module of suites/; harness.py runs it, report.py renders and compares its runs,
stats.py holds the statistics both use. README.md says how to add a suite."""

from __future__ import annotations

import importlib
from types import ModuleType

#: Suite name (as after `outboard bench`, and in meta.json) -> its module in suites/.
SUITES = {"channel": "channel", "rdma": "rdma", "graph": "graph", "mpi": "mpi", "mpi-apps": "mpi_apps",
          "tokenize": "tokenize_offload",
          "tokenizer": "tokenizer_speed", "checkpoint": "checkpoint", "serving": "serving"}


def suite_module(name: str) -> ModuleType:
    if name not in SUITES:
        raise ValueError(f"unknown benchmark suite '{name}' (known: {', '.join(sorted(SUITES))})")
    return importlib.import_module(f"{__name__}.suites.{SUITES[name]}")
