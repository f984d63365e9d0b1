"""Facts about the machine a measurement ran on (recorded next to every figure)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from . import _core


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _virtualization() -> str:
    try:
        out = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True, timeout=2)
        return out.stdout.strip() or "none"
    except (OSError, subprocess.SubprocessError):
        flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        return "vm (hypervisor flag)" if " hypervisor" in flags else "unknown"


def describe() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "virtualization": _virtualization(),
        "transport": _core.transport_version(),
        "load_avg": os.getloadavg(),
    }
