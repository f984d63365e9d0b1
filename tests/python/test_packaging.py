"""Outboard as a Python package: what builds it from a fresh clone or an sdist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UCD8 = REPO / ".venv" / "share" / "outboard" / "unicodedata2-8.0.0.tar.gz"


def test_the_committed_unicode_tables_are_what_the_generator_makes() -> None:
    pytest.importorskip("unicodedata2", reason="scripts/bootstrap.sh installs the pinned unicodedata2")
    if not UCD8.exists():
        pytest.skip(f"{UCD8} is missing: scripts/bootstrap.sh downloads it")
    done = subprocess.run([sys.executable, REPO / "scripts" / "gen_unicode_tables.py", "--check", UCD8],
                          capture_output=True, text=True, timeout=120)
    if done.returncode == 3:
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0, done.stdout + done.stderr
