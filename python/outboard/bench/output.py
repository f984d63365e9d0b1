"""Where a benchmark run writes: results.jsonl, meta.json and report.md in one directory."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from .. import machine


def run_dir(suite: str, out: str | None) -> Path:
    d = Path(out) if out else Path("results") / f"{suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def git_revision() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                           cwd=Path(__file__).resolve().parent)
        return r.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class Results:
    """Appends rows to results.jsonl and writes meta.json with load before and after."""

    def __init__(self, directory: Path, suite: str, extra_meta: dict[str, Any]) -> None:
        self.dir = directory
        self.suite = suite
        self.rows: list[dict[str, Any]] = []
        self.meta = {**machine.describe(), "suite": suite, "git": git_revision(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_before": os.getloadavg(),
                     "core_to_core_before": machine.core_to_core(), **extra_meta}
        self._file = open(directory / "results.jsonl", "w")

    def add(self, case: str, impl: str, params: dict[str, Any], metrics: dict[str, Any],
            correct: dict[str, Any], series: dict[str, Any] | None = None) -> dict[str, Any]:
        row = {"suite": self.suite, "case": case, "impl": impl, "params": params, "metrics": metrics,
               "correctness": correct}
        if series:
            row["series"] = series
        self.rows.append(row)
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        return row

    def close(self) -> None:
        self._file.close()
        self.meta["load_after"] = os.getloadavg()
        self.meta["core_to_core_after"] = machine.core_to_core()
        (self.dir / "meta.json").write_text(json.dumps(self.meta, indent=2))
