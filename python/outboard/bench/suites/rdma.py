"""Suite ``rdma``: the DOCA RDMA / GPUNetIO perftest experiment on our one-sided API.

Writes and reads into a region the agent registered (its ``memory`` service), perftest's shape:
each iteration posts 512 operations, then waits for their completion; 2048 iterations (the
GPUNetIO vs ib_write_bw comparison's parameters); 1..N endpoints. Latency: a read is a round
trip (perftest's read_lat convention); a write is half a round trip of a put_signal ping-pong
with the agent polling memory (perftest's write_lat), and of a write-with-notify the agent answers
with the checksum of what landed. Every cell verifies the bytes on the other side. Peer:
ucx_perftest ucp_put_bw / ucp_get / ucp_put_lat in the same run.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ... import _core
from ..env import client_core, describe, peer_run, peer_unavailable, setup, transport_unavailable, worker
from ..declare import OURS, Case, Chart, Column, Goal, Impl, Measurement, Suite

SIZES = [64, 128, 256, 512, 1024, 2048, 4096, 65536, 1 << 20]
#: perftest's GPUNetIO comparison: 512 writes per iteration, 2048 iterations.
OPS_PER_ITERATION, ITERATIONS = 512, 2048
#: Bytes one iteration may cover (the agent's region for the cell): large sizes post fewer operations.
MAX_BYTES_PER_ITERATION = 64 << 20
#: Ours with perftest's buffer use: every operation the same bytes at both ends (cache-hot).
OURS_ONE_BUFFER = f"{OURS} (one buffer)"
#: Ours with perftest's write_lat protocol: put_signal ping-pong, the agent polling memory.
OURS_PING_PONG = f"{OURS} (put_signal ping-pong)"


#: Over TCP every blocking get is a round trip of ~10 µs: perftest's 2048 iterations would take minutes a cell.
TCP_ITERATIONS = 200
#: ucx_perftest's operations per cell over TCP (its ucp_get there is about a thousand a second).
PEER_TCP_OPS = 4096


def _shape(env: Any, size: int, transport: str) -> tuple[int, int, int]:
    """(operations per iteration, iterations, warm-up iterations) for a size."""
    ops = max(1, min(OPS_PER_ITERATION, MAX_BYTES_PER_ITERATION // size))
    iterations = 100 if env.options.quick else ITERATIONS if transport == "shm" else TCP_ITERATIONS
    if size > 4096:  # keep each cell to about a second on shared memory
        iterations = max(20, iterations * 4096 // size)
    return ops, iterations, max(iterations // 20, 2)


def _ours_bw(put: bool, reuse_buffer: bool = False, gpu_target: bool = False):
    def measure(env: Any, p: dict[str, Any]) -> Measurement:
        ops, iterations, warmup = _shape(env, p["size"], p["transport"])
        r = worker(env, p["transport"], {"op": "one_sided_bw", "put": put, "size": p["size"], "ops": ops,
                                         "iterations": iterations, "warmup": warmup, "reuse_buffer": reuse_buffer,
                                         "endpoints": p.get("endpoints", 1), "core": client_core(env),
                                         "gpu_target": gpu_target})
        metrics = {k: r[k] for k in ("bw_peak_mib_s", "bw_avg_mib_s", "mpps", "iteration_us")}
        verified = ("bytes got back from the GPU region" if gpu_target else
                    "agent checksum of its region" if put else "pattern the agent wrote")
        return Measurement(metrics | {"iterations": iterations, "ops_per_iteration": ops}, r["verified"],
                           {"verified": verified, "lanes": r["lanes"]})
    return measure


def _peer_bw(test: str):
    def measure(env: Any, p: dict[str, Any]) -> Measurement:
        ops, iterations, warmup = _shape(env, p["size"], p["transport"])
        total = ops * iterations
        if p["transport"] != "shm":  # UCX emulates get over TCP with messages: ~1 ms each measured
            total = min(total, PEER_TCP_OPS)
        r = peer_run(env, p["transport"], test, p["size"], total, min(ops * warmup, total // 10))
        return Measurement({"bw_avg_mib_s": r.mib_s, "mpps": r.msg_per_s / 1e6, "operations": total}, True,
                           {"note": "ucx_perftest does not check the bytes"})
    return measure


def _ours_lat(notify: bool, mirror: bool = False):
    def measure(env: Any, p: dict[str, Any]) -> Measurement:
        n = 2000 if env.options.quick else 20000
        if p["size"] > 4096:
            n = max(200, n * 4096 // p["size"])
        r = worker(env, p["transport"], {"op": "one_sided_lat", "notify": notify, "mirror": mirror, "size": p["size"],
                                         "iterations": n, "warmup": max(n // 10, 10), "core": client_core(env)})
        # perftest: write latency is RTT/2, read latency a full RTT
        key = "one_way_us" if notify or mirror else "rtt_us"
        return Measurement({"t_us": r[key], "iterations": n}, r["mismatches"] == 0,
                           {"mismatches": r["mismatches"], "lanes": r["lanes"]})
    return measure


def _peer_put_lat(env: Any, p: dict[str, Any]) -> Measurement:
    n = 2000 if env.options.quick else 20000
    r = peer_run(env, p["transport"], "ucp_put_lat", p["size"], n, max(n // 10, 10))
    return Measurement({"t_us": {"p50": r.p50_us, "avg": r.avg_us}, "iterations": n}, True,
                       {"note": "ucx_perftest does not check the bytes"})


def gpu_unavailable(env: Any, params: dict[str, Any]) -> str | None:
    """Why GPU memory cannot be the target region here, or None."""
    if not (Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi")):
        return "no CUDA device on this machine"
    # The UCX this process loaded, not a ucx_info on PATH (another UCX's, or none).
    if not _core.transport_carries_gpu_memory():
        return (f"this process's UCX carries no CUDA memory ({_core.transport_version()}): it needs a UCX built with "
                "CUDA, such as the libucx-cu13 wheel's")
    return None


def gpu_writer_unavailable(env: Any, params: dict[str, Any]) -> str | None:
    """Why a CUDA kernel cannot store into the agent's region here, or None."""
    return transport_unavailable(env, params) or _core.cuda_usable()


def _posted(gpu: bool):
    def measure(env: Any, p: dict[str, Any]) -> Measurement:
        ops, iterations, warmup = _shape(env, p["size"], p["transport"])
        r = worker(env, p["transport"], {"op": "posted_writes", "gpu": gpu, "size": p["size"], "ops": ops,
                                         "iterations": iterations, "warmup": warmup, "core": client_core(env)})
        metrics = {"bw_avg_mib_s": r["bw_avg_mib_s"], "mpps": r["mpps"], "iterations": iterations,
                   "ops_per_iteration": ops} | ({"kernel_bw_mib_s": r["kernel_bw_mib_s"]} if gpu else {})
        return Measurement(metrics, r["verified"], {"verified": "agent checksum of its region after the last signal",
                                                    "lanes": r["lanes"]})
    return measure


BW_COLUMNS = [Column("#iterations", "iterations", 0), Column("ops / iteration", "ops_per_iteration", 0),
              Column("peer operations", "operations", 0),
              Column("BW peak MiB/s", "bw_peak_mib_s", 0), Column("BW average MiB/s", "bw_avg_mib_s", 0),
              Column("MsgRate Mpps", "mpps", 3)]
LAT_COLUMNS = [Column("#iterations", "iterations", 0), Column("t_min µs", "t_us.min", 3),
               Column("t_max µs", "t_us.max", 2), Column("t_typical µs", "t_us.p50", 3),
               Column("t_avg µs", "t_us.avg", 3), Column("99% µs", "t_us.p99", 3), Column("99.9% µs", "t_us.p999", 3)]
TRANSPORT_SWEEP = {"transport": ["shm", "tcp"]}

WRITE_BW = Case(
    "write_bw", "write_bw: puts into the agent's registered region, vs ucx_perftest ucp_put_bw",
    sweep={**TRANSPORT_SWEEP, "size": SIZES}, quick={"transport": ["shm"], "size": [64, 4096]},
    impls=[Impl(OURS, _ours_bw(True), transport_unavailable),
           Impl(OURS_ONE_BUFFER, _ours_bw(True, reuse_buffer=True), transport_unavailable),
           Impl("ucx_perftest", _peer_bw("ucp_put_bw"), peer_unavailable)],
    columns=BW_COLUMNS, reference="ucx_perftest", ratio_metric="bw_avg_mib_s", lower_is_better=False,
    ours=OURS_ONE_BUFFER, also_ratio=(OURS,), goal=Goal(0.9, {"size": 4096}),
    notes="An iteration is 512 puts (fewer above 128 KiB: 64 MiB per iteration at most) then a flush; 2048 "
          "iterations on shared memory, 200 over TCP (fewer above 4 KiB); peak is the "
          "best iteration, average all bytes over all iterations. After the cell the agent checksums its region "
          "against ours. `outboard (one buffer)` reuses one buffer as perftest and ucx_perftest do, which keeps "
          "everything in cache: its ratio (bold) compares like with like and is the goal's, ≥ 0.9× ucx_perftest "
          "at 4 KiB. `outboard` gives each put of an iteration its own bytes at both ends (2 MiB at 4 KiB: out "
          "of cache), which ucx_perftest cannot do; its ratio shows what distinct data costs.")

READ_BW = Case(
    "read_bw", "read_bw: gets from the agent's registered region, vs ucx_perftest ucp_get",
    sweep={**TRANSPORT_SWEEP, "size": SIZES}, quick={"transport": ["shm"], "size": [4096]},
    impls=[Impl(OURS, _ours_bw(False), transport_unavailable),
           Impl(OURS_ONE_BUFFER, _ours_bw(False, reuse_buffer=True), transport_unavailable),
           Impl("ucx_perftest", _peer_bw("ucp_get"), peer_unavailable)],
    columns=BW_COLUMNS, reference="ucx_perftest", ratio_metric="bw_avg_mib_s", lower_is_better=False,
    ours=OURS_ONE_BUFFER, also_ratio=(OURS,),
    notes="Gets complete in place (no flush); the last iteration reads into zeroed memory and is compared with "
          "the pattern the agent wrote. Ratios as for write_bw: one buffer (bold) like ucx_perftest, and "
          "distinct buffers. Over TCP, ucx_perftest's ucp_get completes about a thousand gets a second (~1 ms "
          "each, whatever the size) where ours over the same TCP take ~10 µs: UCX emulates a get there with "
          "messages the serving side must answer, and ucx_perftest's server answers them that slowly. Its TCP "
          "ratios measure that, not the transport; the shared-memory rows are the comparison.")

ENDPOINTS = Case(
    "endpoints", "write_bw over 1..N endpoints (connections), 4 KiB",
    sweep={"transport": ["shm"], "size": [4096], "endpoints": [1, 2, 4, 8]}, quick={"endpoints": [1, 2]},
    impls=[Impl(OURS, _ours_bw(True))], columns=BW_COLUMNS,
    notes="Operations go round-robin over the connections, each into its own agent region; one flush per "
          "connection ends an iteration.")

WRITE_LAT = Case(
    "write_lat", "write_lat: put_signal ping-pong and write-with-notify (RTT/2), vs ucx_perftest ucp_put_lat",
    sweep={**TRANSPORT_SWEEP, "size": SIZES}, quick={"transport": ["shm"], "size": [64, 4096]},
    impls=[Impl(OURS_PING_PONG, _ours_lat(False, mirror=True), transport_unavailable),
           Impl(OURS, _ours_lat(True), transport_unavailable), Impl("ucx_perftest", _peer_put_lat, peer_unavailable)],
    columns=LAT_COLUMNS, reference="ucx_perftest", ratio_metric="t_us.p50", ours=OURS_PING_PONG, also_ratio=(OURS,),
    goal=Goal(1.2),
    notes="Half a round trip, as perftest's write_lat. `outboard (put_signal ping-pong)` is perftest's protocol on "
          "our API, like for like with ucp_put_lat (its ratio, bold, is the goal's: ≤ 1.2× ucx_perftest): a "
          "put_signal() of the bytes into the agent's region, the signal word their last 8 (perftest's sequence "
          "number is the last byte of its message); the agent's memory mirror, polling that word, puts the bytes "
          "back into ours the same way; we poll for it (wait_signal()) and check every byte. perftest's peer "
          "answers with its own buffer without reading what arrived; ours reads it to send it back (at 64 B, the "
          "cache line the signal came in). `outboard` is a write-with-notify: the agent's "
          "memory service is notified and answers with the checksum of the bytes it sees, which we check.")

READ_LAT = Case(
    "read_lat", "read_lat: a get per round trip",
    sweep={**TRANSPORT_SWEEP, "size": SIZES}, quick={"transport": ["shm"], "size": [64]},
    impls=[Impl(OURS, _ours_lat(False), transport_unavailable)], columns=LAT_COLUMNS,
    notes="Full round trip, as perftest reports read latency. ucx_perftest's ucp_get is a bandwidth test, so "
          "there is no peer column here.")

GPU = Case(
    "gpu", "GPU memory as the target region",
    sweep={"transport": ["shm"], "size": [4096]}, impls=[Impl(OURS, _ours_bw(True, gpu_target=True), gpu_unavailable)],
    columns=BW_COLUMNS,
    notes="write_bw (distinct buffers) into an agent region that UCX allocated in GPU memory (`memory` service "
          "'A' with the GPU kind; `Connection::allocate_memory(size, MemoryKind::kCuda)`); UCX carries the puts "
          "(cuda_ipc / cuda_copy), never a CPU copy. The agent's CPU does not read GPU memory, so after the cell we "
          "get the bytes back and compare. Skipped cells list the reason below.")

GPU_INITIATED = Case(
    "gpu_initiated", "gpu_initiated: a CUDA kernel's stores into the agent's region vs the CPU's, signalled",
    sweep={"transport": ["shm"], "size": [64, 256, 1024, 4096]}, quick={"transport": ["shm"], "size": [64, 4096]},
    impls=[Impl(f"{OURS} (GPU-initiated)", _posted(True), gpu_writer_unavailable),
           Impl(f"{OURS} (CPU-posted)", _posted(False), transport_unavailable)],
    columns=[Column("#iterations", "iterations", 0), Column("ops / iteration", "ops_per_iteration", 0),
             Column("BW average MiB/s", "bw_avg_mib_s", 0), Column("MsgRate Mpps", "mpps", 3),
             Column("kernel BW MiB/s (CUDA events)", "kernel_bw_mib_s", 0)],
    notes="GPUNetIO's experiment on one host, perftest's shape (512 writes of the size per iteration, 2048 "
          "iterations): the agent's region (shared memory) is mapped into the client, which registers it with "
          "CUDA (`cudaHostRegister`); one kernel of 512 threads stores each iteration's words, fences "
          "(`__threadfence_system`) and sets the iteration's number in a signal word the agent polls (memory "
          "'G'). No CPU is in the data path. CPU-posted: the client's thread stores the same words and signal. "
          "Average bandwidth is wall clock from the first store to the agent's answer that the last signal "
          "landed, with the checksum of what it holds (the last iteration's bytes, checked); the kernel's own "
          "time comes from CUDA events. Across hosts a kernel would post through UCX's device API (`ucp_device_*`, "
          "UCX ≥ 1.20, with a NIC that has it), which this build does not use. Skipped cells list the reason.")

SUITE = Suite(
    name="rdma", title="One-sided data path: write/read bandwidth and latency (perftest shape)",
    cases=[WRITE_BW, READ_BW, ENDPOINTS, WRITE_LAT, READ_LAT, GPU, GPU_INITIATED],
    charts=[Chart("write_bw", "size", "bw_avg_mib_s", "write_bw average", "MiB/s", logy=True, split=["transport"]),
            Chart("read_bw", "size", "bw_avg_mib_s", "read_bw average", "MiB/s", logy=True, split=["transport"]),
            Chart("write_lat", "size", "t_us.p50", "write_lat typical (one-way)", "µs", logy=True, split=["transport"]),
            Chart("endpoints", "endpoints", "bw_avg_mib_s", "write_bw vs endpoints (4 KiB)", "MiB/s")],
    setup=setup, describe=describe,
    help="one-sided write/read bandwidth and latency (perftest shape) vs ucx_perftest",
    notes="**Mapped regions.** On one host UCX maps the agent's region into the client's process "
          "(`ucp_rkey_ptr`), so our puts and gets there are CPU copies made in the call, and put_signal's signal "
          "a release store rather than UCX's fence (a full barrier) and a second put. ucx_perftest makes the "
          "same copies inside `ucp_put_nbx`/`ucp_get_nbx`. Over TCP and across hosts every operation goes "
          "through UCX (`map_peer_regions=False` does that on one host too).\n\n"
          "**GPU-initiated path.** DOCA GPUNetIO lets a CUDA kernel post RDMA writes itself "
          "(`doca_gpu_dev_rdma_write_*` on a queue the CPU set up). Here the same experiment maps onto: a region "
          "allocated in GPU memory and registered with UCX (`ucp_mem_map` of CUDA memory, needs UCX built with "
          "CUDA and, across hosts, GPUDirect RDMA); its descriptor exported to the peer as for host memory; the "
          "writes issued by the CPU (the `gpu` case). The `gpu_initiated` case has a kernel issue them: on one "
          "host as stores into the agent's mapped region, signalled in a word the agent polls; across hosts that "
          "takes UCX's device API (UCX ≥ 1.20 `ucp_device_*`) and a NIC that has it, which this build does not "
          "use. Host-initiated writes into GPU memory need only the CUDA-enabled UCX.")
