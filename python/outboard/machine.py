"""Facts about the machine a measurement ran on (recorded next to every figure)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from . import _bench, _core


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


#: The probe's shape: ~25 ms even when the two cores are far apart (~0.5 µs one way).
CORE_TO_CORE_BATCHES, CORE_TO_CORE_ROUND_TRIPS, CORE_TO_CORE_TIMEOUT_S = 25, 1000, 5.0


def core_to_core() -> dict[str, Any] | None:
    """One-way time of a cache line between the first two cores this process may use (median and
    range over batches), or None with fewer than two cores. On a small VM it changes from run to run
    as the host moves the vCPUs, and every figure between processes changes with it."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    ns = sorted(float(v) for v in _bench.bench_core_to_core(cores[0], cores[1], CORE_TO_CORE_BATCHES,
                                                            CORE_TO_CORE_ROUND_TRIPS, CORE_TO_CORE_TIMEOUT_S))
    return {"cores": cores[:2], "p50_ns": round(ns[len(ns) // 2], 1), "min_ns": round(ns[0], 1),
            "max_ns": round(ns[-1], 1)}


def describe() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "virtualization": _virtualization(),
        "outboard": _core.version(),
        "transport": _core.transport_version(),
        "seal_engine": _core.seal_engine(),
        "load_avg": os.getloadavg(),
    }
