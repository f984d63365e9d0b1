"""Channel round-trip latency: the main job until the tokenization benchmark lands."""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import _bench, _core
from .client import Client


@dataclass(frozen=True)
class LatencyRow:
    size: int
    iterations: int
    p50_us: float
    p90_us: float
    p99_us: float
    min_us: float
    max_us: float
    mismatches: int

    @property
    def one_way_p50_us(self) -> float:
        return self.p50_us / 2


def measure(client: Client, size: int, iterations: int, warmup: int, timeout: float = 10.0) -> LatencyRow:
    samples, mismatches = _bench.bench_round_trips(client.connection, size, iterations, warmup, timeout)
    s = _core.summarize(samples.tolist())
    return LatencyRow(size, s["count"], s["p50"], s["p90"], s["p99"], s["min"], s["max"], int(mismatches))


def transports(lanes: str) -> list[str]:
    """Transports of an endpoint from its ucp_ep_print_info text, e.g. ['sysv', 'posix', 'cma']."""
    return re.findall(r"lane\[\d+\]:\s+\d+:(\w+)/", lanes)


def format_size(n: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def render(rows: list[LatencyRow]) -> str:
    head = f"{'size':>9} {'iters':>7} {'p50 µs':>9} {'p90 µs':>9} {'p99 µs':>9} {'min µs':>9} {'max µs':>9} {'one-way p50':>12} {'verified':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        ok = "ok" if r.mismatches == 0 else f"{r.mismatches} BAD"
        lines.append(
            f"{format_size(r.size):>9} {r.iterations:>7} {r.p50_us:>9.2f} {r.p90_us:>9.2f} {r.p99_us:>9.2f} "
            f"{r.min_us:>9.2f} {r.max_us:>9.2f} {r.one_way_p50_us:>12.2f} {ok:>9}"
        )
    return "\n".join(lines)
