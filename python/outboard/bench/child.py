"""What the suites' child processes share: ``python -m outboard.bench.<module> SPEC_JSON`` runs one
spec and prints one JSON object, its result or {"error": ...}, which the suite reads with ``result``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def main(run: Callable[[dict[str, Any]], dict[str, Any]],
         cleanup: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Runs ``run`` on the spec in argv[1] (then ``cleanup``, whatever happened) and prints the result."""
    spec = json.loads(sys.argv[1])
    try:
        result = run(spec)
    except Exception as e:  # reported to the suite, which records the cell as failed
        result = {"error": f"{type(e).__name__}: {e}"}
    finally:
        if cleanup is not None:
            cleanup(spec)
    print(json.dumps(result), flush=True)
    return 0 if "error" not in result else 1


def result(name: str, stdout: str, stderr: str, status: int | None) -> dict[str, Any]:
    """What a child printed last, or, where it printed nothing (it crashed), an error naming it."""
    lines = stdout.strip().splitlines()
    if lines:
        return json.loads(lines[-1])
    return {"error": f"{name} exited with status {status}: {stderr.strip()[-500:]}"}
