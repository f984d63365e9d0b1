"""A benchmark client in its own process: ``python -m outboard.bench.worker SPEC_JSON``.

Suites run clients here rather than in their own process because UCX reads its transport
selection (UCX_TLS) once per process, because a client in another network namespace must be
another process, and because concurrent clients are separate processes in real use. The worker
prints one JSON object: the measurement, or {"error": ...}.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from . import child

#: Seconds any single operation of a worker may take.
OP_TIMEOUT_S = 60.0


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from .. import _bench, connect
    from ..latency import transports
    from .stats import summarize

    if spec.get("core") is not None:
        os.sched_setaffinity(0, {int(spec["core"])})
    op, address, size = spec["op"], spec["agent"], int(spec["size"])
    if op == "session":
        cold = _bench.bench_session(address, size, 1, OP_TIMEOUT_S)  # the process's first: starts UCX too
        # UCX's context lives while any connection does: one kept open makes the rest warm connects.
        with connect(address):
            runs = [_bench.bench_session(address, size, int(spec["count"]), OP_TIMEOUT_S)
                    for _ in range(spec["trials"])]
        return {"connect_cold_us": cold["connect_us"], "connect_us": summarize([r["connect_us"] for r in runs]),
                "stream_us": summarize([r["stream_us"] for r in runs]),
                "per_message_us": summarize([r["stream_us"] / int(spec["count"]) for r in runs]),
                "verified": all(r["verified"] for r in runs) and cold["verified"]}
    if op == "one_sided_bw":
        clients = [connect(address) for _ in range(int(spec.get("endpoints", 1)))]
        try:
            r = _bench.bench_one_sided_bandwidth([c.connection for c in clients], spec["put"], size, int(spec["ops"]),
                                                int(spec["iterations"]), int(spec["warmup"]),
                                                bool(spec.get("reuse_buffer")), OP_TIMEOUT_S,
                                                gpu_target=bool(spec.get("gpu_target")))
            per_iteration = r["iteration_us"]
            bytes_per_iteration = r["bytes"] / len(per_iteration)
            seconds = float(per_iteration.sum()) / 1e6
            return {"lanes": transports(clients[0].connection.lanes), "verified": r["verified"],
                    "bw_peak_mib_s": bytes_per_iteration / (float(per_iteration.min()) / 1e6) / 2**20,
                    "bw_avg_mib_s": r["bytes"] / seconds / 2**20, "mpps": r["ops"] / seconds / 1e6,
                    "iteration_us": summarize(per_iteration)}
        finally:
            for c in clients:
                c.close()
    secure = spec.get("secure", {})
    if op == "connect":
        if spec.get("full_handshake"):  # no session kept: certificates every time
            secure = {**secure, "tls_session_lifetime_s": 0}
        with connect(address, **secure):  # UCX's context stays up: the connects timed are warm ones
            samples, resumed = [], 0
            for _ in range(int(spec["trials"])):
                t0 = time.perf_counter()
                c = connect(address, **secure)
                samples.append((time.perf_counter() - t0) * 1e6)
                resumed += c.connection.security.endswith(", resumed")
                c.close()
        return {"connect_us": summarize(samples), "resumed": resumed}
    with connect(address, ring_slots=spec.get("ring_slots"), **secure) as client:
        out: dict[str, Any] = {"lanes": transports(client.connection.lanes)}
        if start_at := spec.get("start_at"):  # concurrent clients start together
            time.sleep(max(0.0, start_at - time.time()))
        if op == "round_trips":
            t0 = time.perf_counter()
            samples, mismatches = _bench.bench_round_trips(client.connection, size, int(spec["iterations"]),
                                                          int(spec["warmup"]), OP_TIMEOUT_S)
            out |= {"one_way_us": summarize(samples / 2), "rtt_us": summarize(samples), "mismatches": int(mismatches),
                    "seconds": time.perf_counter() - t0, "requests": len(samples)}
        elif op == "stream":
            reuse = bool(spec.get("reuse_payload"))
            _bench.bench_stream(client.connection, size, max(1, int(spec["count"]) // 10), reuse, OP_TIMEOUT_S)  # warm-up
            agent_cpu_ns = client.stats()["cpu_ns"]  # the process serving this client: its session's
            trials = [_bench.bench_stream(client.connection, size, int(spec["count"]), reuse, OP_TIMEOUT_S)
                      for _ in range(int(spec["trials"]))]
            agent_cpu_ns = client.stats()["cpu_ns"] - agent_cpu_ns
            out |= {"mib_s": summarize([t["bytes"] / t["seconds"] / 2**20 for t in trials]),
                    "msg_per_s": summarize([t["messages"] / t["seconds"] for t in trials]),
                    "agent_cpu_s_per_gib": agent_cpu_ns / 1e9 / (sum(t["bytes"] for t in trials) / 2**30),
                    "verified": all(t["verified"] for t in trials)}
        elif op == "posted_writes":
            r = _bench.bench_posted_writes(client.connection, bool(spec["gpu"]), size, int(spec["ops"]),
                                           int(spec["iterations"]), int(spec["warmup"]), OP_TIMEOUT_S)
            seconds = r["wall_ns"] / 1e9
            out |= {"verified": r["verified"], "bw_avg_mib_s": r["bytes"] / seconds / 2**20,
                    "mpps": r["ops"] / seconds / 1e6,
                    "kernel_bw_mib_s": r["bytes"] / (r["kernel_ns"] / 1e9) / 2**20 if r["kernel_ns"] else None}
        elif op == "one_sided_lat":
            if spec.get("mirror"):
                samples, mismatches = _bench.bench_signal_ping_pong(client.connection, size, int(spec["iterations"]),
                                                                   int(spec["warmup"]), OP_TIMEOUT_S)
            else:
                samples, mismatches = _bench.bench_one_sided_latency(client.connection, spec["notify"], size,
                                                                    int(spec["iterations"]), int(spec["warmup"]),
                                                                    OP_TIMEOUT_S)
            out |= {"rtt_us": summarize(samples), "one_way_us": summarize(samples / 2), "mismatches": int(mismatches)}
        else:
            raise ValueError(f"unknown worker op '{op}'")
        return out


if __name__ == "__main__":
    sys.exit(child.main(run))
