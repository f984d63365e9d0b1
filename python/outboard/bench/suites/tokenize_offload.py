"""``outboard bench tokenize``: the BF3-Bench tokenization-offload experiment, done right
(shared/reference/tokenization-offload.md).

Placements: ``host`` (tokenize in this process, copy the ids into the consumer's buffer), ``agent``
(the agent tokenizes and puts the ids straight into the consumer's registered buffer) and ``auto``
(per request, AutoPolicy). Every request uses a distinct payload cut from a mixed corpus, the same
sequence for every placement, placements interleaved request by request; the agent's ids are
compared with the host's for every request that was timed.

Single requests: stages acquire (the text's UTF-8 bytes), tokenize, transfer (host: ids copied to
the consumer buffer; agent: text to the agent, queueing, ids put back, answer — the round trip
minus the agent's tokenize time; on a GPU, the copy of ids up to it too), embed (word_embed[id] +
pos_embed[pos], 50257 x 768 float32: torch on CUDA when a GPU is present, else numpy on the CPU),
total measured end to end. Load: Poisson arrivals at rising rates, open loop (each request
submitted at its arrival, latency from then); a request is UTF-8 text -> ids (the embed is GPU work
in production and equal for every placement); CPU per request of the consumer process (getrusage),
also net of the load generator's own cost per arrival, and of the agent (its stats).
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import resource
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ... import _bench, _core
from ...errors import BadConfig, Error
from ...offload import SUBMIT_THREADS, measure_cpu, open_local
from ..consumer import Embedder, Payloads, TorchEmbedder, gpu_absent, make_embedder, random_words
from ..declare import Option, Options, Suite, numbers
from ..stats import Ratio, cell_key, get, median, ratio_stats, summarize

PLACEMENTS = ("host", "agent", "auto")
NATIVE_PLACEMENTS = ("host", "agent")  # the load test driven from C++ too (auto's policy is Python)
ASYNCIO_PLACEMENTS = ("host", "agent")  # and from an asyncio server
ENGINE_PLACEMENTS = PLACEMENTS  # and from an engine's step loop (a BatchQueue routes auto's batches too)
#: Share of each rate's schedule that the load generator's own cost per arrival is measured on.
FLOOR_SHARE = 0.3
#: Most requests one load-test cell sends: the highest rates run shorter than the others.
MAX_LOAD_REQUESTS = 20_000
#: Requests timed back to back on the host to find its capacity, which the load test's rates are
#: fractions of; as many are sent to the agent at once to find its own.
CALIBRATION_REQUESTS = 100
#: Each load cell runs this many times, the repetitions interleaved (every rate and shape, then again):
#: a ratio is the median of the repetitions', with their lowest and highest.
LOAD_REPEATS = 3
#: A side (the host's cores, the agent's) is saturated in a cell offered at least this share of its
#: capacity, or when the cell's throughput falls this share short of the offered rate; a ratio is
#: judged only where neither placement's side is.
SATURATED_SHARE = 0.9
SHORTFALL_SHARE = 0.05
#: The goal of agent ÷ host consumer CPU per request, raw, with default client settings (issue [P2]).
CPU_RATIO_GOAL = 0.10
#: The consumer CPU phases of an agent request, besides the load generator's arrival.
CPU_PHASES = ("submit", "wait", "completion")
#: The step of the engine-shaped load: it takes finished batches (and puts arrived ones) once a step.
ENGINE_STEP_S = 0.001
MODELS = {"gpt2": "GPT-2 BPE", "cl100k_base": "cl100k BPE", "bert-base-uncased": "BERT WordPiece"}
DEFAULT_MODELS = "gpt2,bert-base-uncased"
#: How long the local agent's progress thread polls its core before sleeping (its --spin-us; always, not adaptively).
AGENT_POLL_US = 1_000_000

#: The published 8 KB figures (BF3-Bench, another machine: BlueField-3 Arm + A100X), µs.
PUBLISHED = {
    "host": {"tokenize": 332, "transfer": 50, "embed": 46, "total": 628},
    "agent": {"tokenize": 531, "transfer": 1011, "embed": 46, "total": 1588},
}


def _now() -> int:
    return time.perf_counter_ns()


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Pipeline:
    """One consumer: its tokenizers per placement, its buffers, its embedder."""

    IDS = 1 << 22  # id slots of each buffer

    def __init__(self, client: Any, model: str, embedder: Embedder | TorchEmbedder) -> None:
        self.embed = embedder
        self.buffer = embedder.host_buffer(self.IDS)  # where the host placement's ids are copied
        # Agent batches land in this process's memory: for a GPU, pinned buffers of the embedder's (one per
        # tokenizer); else the tokenizer's own registered memory, which UCX 1.13 writes one-sidedly on one
        # host (into other memory its puts arrive as messages this process copies).
        self.tok = {p: client.tokenizer(model, placement=p, output=embedder.host_buffer(self.IDS)
                                        if p != "host" and embedder.pinned else None)
                    for p in PLACEMENTS}
        # The fourth placement, where the embedder is on a GPU: the text copied there, tokenized there.
        self.gpu_absent = gpu_absent(model, embedder)
        if self.gpu_absent is None:
            self.tok["gpu"] = client.tokenizer(model, placement="gpu", output=embedder.device_buffer(self.IDS))

    def request(self, placement: str, texts: list[str], *, embed: bool = True) -> dict[str, Any]:
        t0 = _now()
        cpu0 = time.thread_time_ns()
        data = [t.encode() for t in texts]
        t1 = _now()
        batch = self.tok[placement].encode_batch(data)
        t2 = _now()
        where = batch.placement
        if where == "host":  # the ids still have to reach the consumer's buffer
            ids = self.buffer[:len(batch.ids)]
            np.copyto(ids, batch.ids)
            tokenize_ns = t2 - t1
        elif where == "gpu":  # made on the device; transfer is the text's copy in, the offsets' out, the launches
            ids = batch.ids
            tokenize_ns = batch.stages["kernels"]
        else:  # already there: the agent wrote them into our registered memory
            ids = batch.ids
            tokenize_ns = batch.agent["tokenize_ns"]
        t3 = _now()
        staged = self.embed.to_device(ids, batch.offsets) if embed else None
        t4 = _now()
        if embed:
            self.embed(staged)
        t5 = _now()
        # transfer: the ids from where they were made to where the lookup runs (for the agent, also
        # the text's way there and the answer's way back, outside its tokenize time)
        transfer_ns = (t4 - t2) if where == "host" else (t2 - t1) - tokenize_ns + (t4 - t3)  # gpu: as the agent
        out = {"placement": where, "batch": batch, "acquire": t1 - t0, "tokenize": tokenize_ns,
               "transfer": transfer_ns, "embed": t5 - t4, "total": t5 - t0,
               "consumer_cpu": time.thread_time_ns() - cpu0, "agent_cpu": batch.agent.get("cpu_ns", 0)}
        events = getattr(self.embed, "events_ns", None)
        if embed and events:  # on a GPU: the copy's and the lookup's own time, by CUDA events
            out |= {"copy_gpu": events["copy"], "embed_gpu": events["embed"]}
        return out


def single_requests(results: Any, pipe: Pipeline, model: str, workload: str, payload: int, batch: int,
                    requests: int, texts_for: Any, progress: Any) -> None:
    placements = tuple(pipe.tok)
    samples: dict[str, dict[str, list[float]]] = {p: {} for p in placements}
    mismatches = {p: 0 for p in placements}
    tokens = 0
    for i in range(requests + max(3, requests // 10)):
        warm = i < max(3, requests // 10)
        texts = texts_for(payload, batch)
        order = placements if i % 2 == 0 else placements[::-1]
        got: dict[str, Any] = {}
        for p in order:
            r = pipe.request(p, texts)
            got[p] = r
            if warm:
                continue
            for stage in ("acquire", "tokenize", "transfer", "embed", "total", "consumer_cpu", "agent_cpu",
                          "copy_gpu", "embed_gpu"):
                if stage in r:
                    samples[p].setdefault(stage, []).append(r[stage] / 1000)
        ref = got["host"]["batch"]
        for p in placements[1:]:
            b = got[p]["batch"]
            ids = b.ids.cpu().numpy() if p == "gpu" else b.ids
            if not (np.array_equal(ids, ref.ids) and np.array_equal(b.offsets, ref.offsets)):
                mismatches[p] += 1
        if not warm:
            tokens += len(ref.ids)
        progress()
    for p in placements:
        metrics = {f"{stage}_us": summarize(v) for stage, v in samples[p].items()}
        metrics["tokens_per_request"] = tokens / max(requests, 1)
        results.add("single", p, {"model": model, "workload": workload, "payload_bytes": payload, "batch": batch},
                    metrics, {"requests": requests, "ids_differ": mismatches[p], "reference": "host placement"})


def load_test(results: Any, client: Any, pipe: Pipeline, model: str, payload: int, rates: list[float],
              capacity: dict[str, float], seconds: float, texts_for: Any, progress: Any,
              repeats: int = LOAD_REPEATS) -> None:
    """Open loop, each request submitted at its Poisson arrival time, whatever is still running (a
    server does not wait for one request before taking the next); latency runs from the scheduled
    arrival to the ids in hand. Texts arrive as UTF-8 bytes, as off a socket. Three server shapes:
    threads (one dispatcher thread calls submit(), futures finish on the tokenizer's threads),
    asyncio (a task per request awaits encode_batch_async()), and an inference engine's step loop
    (each step puts the requests that arrived and polls a BatchQueue: no wake-up per request).

    Waking at each arrival is the load generator's cost, not the tokenizer's: it is measured per
    rate and shape by the same schedule (its first FLOOR_SHARE) with nothing submitted, and reported
    beside (and taken out of) each placement's consumer CPU. An agent request's CPU is split into
    submit, wait (the sleep and wake-up of the thread that takes answers) and completion, in the
    first repetition only (its ~5 clock reads cost ~3 µs a request, which the others do not pay); each cell
    says which side, if any, was saturated (``capacity``: requests/s of each, measured before).
    Every cell runs ``repeats`` times, interleaved."""
    for repeat, rate in [(r, rate) for r in range(repeats) for rate in rates]:
        _load_rate(results, client, pipe, model, payload, rate, repeat, capacity, seconds, texts_for, progress)


def _load_rate(results: Any, client: Any, pipe: Pipeline, model: str, payload: int, rate: float, repeat: int,
               capacity: dict[str, float], seconds: float, texts_for: Any, progress: Any) -> None:
    """One repetition of one rate: every shape and placement."""
    host = pipe.tok["host"]  # the reference for every placement's ids
    params = {"model": model, "payload_bytes": payload, "offered_rps": rate, "host_threads": SUBMIT_THREADS,
              "repeat": repeat}
    rng = random.Random(int(rate * 1000) + 7919 * repeat)
    arrivals, t = [], 0.0
    while t < min(seconds, MAX_LOAD_REQUESTS / rate):
        t += rng.expovariate(rate)
        arrivals.append(t)
    floor_arrivals = arrivals[:max(1, int(len(arrivals) * FLOOR_SHARE))]
    arrived = len(arrivals) / arrivals[-1]
    for case, placements, open_loop in (("load", PLACEMENTS, _open_loop_threads),
                                        ("load_asyncio", ASYNCIO_PLACEMENTS, _open_loop_asyncio),
                                        ("load_engine", ENGINE_PLACEMENTS, _open_loop_engine)):
        _freeze_heap()
        floor = open_loop(None, [], floor_arrivals, 0.0)[4] / len(floor_arrivals)
        for p in placements:
            tok = pipe.tok[p]
            work = [[x.encode() for x in texts_for(payload, 1)] for _ in arrivals]
            _freeze_heap()
            agent0 = client.stats()
            routed0 = dict(tok.policy.routed) if p == "auto" else {}
            # Every request ends within the tokenizer's timeout (failing if need be); the margin is for slack.
            with measure_cpu() if repeat == 0 else nullcontext() as split:
                lat, sums, failed, wall, cpu = open_loop(tok, work, arrivals, seconds + tok.timeout + 5)
            if len(lat) + failed < len(work):
                raise TimeoutError(f"load test {model} {p} ({case}) at {rate:.0f} req/s: "
                                   f"{len(work) - len(lat) - failed} requests never ended")
            agent = _agent_since(client, agent0)
            differ = sum(_core.checksum(host.encode_batch(t).ids) != digest for t, digest in sums)
            routed = {k: v - routed0[k] for k, v in tok.policy.routed.items()} if p == "auto" else {}
            phases = ({"submit": split.submit_ns / 1e3, "wait": split.wait_ns / 1e3,
                       "completion": split.completion_ns / 1e3} if p != "host" and split else None)
            results.add(case, p, {**params, "step_s": ENGINE_STEP_S} if case == "load_engine" else params,
                        _load_metrics(p, rate, arrived, capacity, lat, wall, cpu, floor, agent, phases),
                        {"requests": len(work), "failed": failed, "ids_differ": differ, "routed": routed,
                         "ok": failed == 0 and differ == 0})
            progress()
    # The same schedule driven by C++ (a native server's shape): what the Python layer costs.
    floor = _bench.bench_open_loop_arrivals(floor_arrivals)["cpu_s"] * 1e6 / len(floor_arrivals)
    for p in NATIVE_PLACEMENTS:
        texts = [texts_for(payload, 1)[0].encode() for _ in arrivals]
        agent0 = client.stats()
        timeout = pipe.tok[p].timeout
        r = (_bench.bench_open_loop_host(host._local._core, texts, arrivals, SUBMIT_THREADS, timeout) if p == "host"
             else _bench.bench_open_loop_agent(client.connection, pipe.tok[p]._remote, texts, arrivals, timeout,
                                               time_phases=repeat == 0))
        agent = _agent_since(client, agent0)
        differ = sum(int(sum_) != _core.checksum(host.encode_batch([t]).ids)
                     for t, sum_ in zip(texts, r["checksums"]) if sum_ != 0)
        phases = ({phase: r[f"{phase}_cpu_s"] * 1e6 for phase in CPU_PHASES} if p == "agent" and repeat == 0
                  else None)
        results.add("load_native", p, params,
                    _load_metrics(p, rate, arrived, capacity, list(r["latency_us"]), r["wall_s"], r["cpu_s"] * 1e6,
                                  floor, agent, phases),
                    {"requests": len(texts), "failed": r["failed"], "ids_differ": differ,
                     "ok": r["failed"] == 0 and differ == 0})
        progress()


def _agent_since(client: Any, before: dict[str, Any]) -> dict[str, float]:
    """The agent's CPU (µs, its polling included) and the doorbells it rang (answers to a consumer
    asleep: one wakes it however many answers it finds) since ``before``, its earlier stats()."""
    now = client.stats()
    return {"cpu_us": (now["cpu_ns"] - before["cpu_ns"]) / 1e3, "doorbells": now["doorbells_out"] - before["doorbells_out"]}


def _load_metrics(placement: str, rate: float, arrived_rps: float, capacity: dict[str, float], lat: list[float],
                  wall: float, cpu_us: float, floor_us: float, agent: dict[str, float],
                  phases_us: dict[str, float] | None) -> dict[str, Any]:
    """A load cell's figures; ``agent``: what the agent counted over the cell (_agent_since);
    ``phases_us``: the consumer's CPU by phase over the cell (agent requests)."""
    done = max(len(lat), 1)
    throughput = len(lat) / wall
    sides = {"host": ("host",), "agent": ("agent",), "auto": ("host", "agent")}[placement]
    # against the rate the schedule's arrivals came at (a short Poisson schedule strays from `rate`)
    short = throughput < (1 - SHORTFALL_SHARE) * arrived_rps
    # auto spreads its work over both sides: only a shortfall says one of them could not keep up
    saturated = [side for side in sides if short or (len(sides) == 1 and rate >= SATURATED_SHARE * capacity[side])]
    metrics = {"throughput_rps": throughput, "latency_us": summarize(lat),
               "consumer_cpu_us_per_request": cpu_us / done, "arrival_cpu_us_per_request": floor_us,
               "consumer_cpu_net_us_per_request": max(cpu_us / done - floor_us, 0.0),
               "agent_cpu_us_per_request": agent["cpu_us"] / done,
               "doorbells_per_request": agent["doorbells"] / done,
               "offered_share": {side: rate / capacity[side] for side in sides}, "saturated": saturated}
    if phases_us is not None:
        metrics["consumer_cpu_split_us_per_request"] = {k: v / done for k, v in phases_us.items()}
    return metrics


#: What an open loop returns: latencies (µs) and (texts, ids checksum) of the requests that
#: succeeded, how many failed, wall seconds from the first arrival, consumer CPU µs in all.
OpenLoop = tuple[list[float], list[tuple[list[bytes], int]], int, float, float]


def _open_loop_threads(tok: Any, work: list[list[bytes]], arrivals: list[float], limit_s: float) -> OpenLoop:
    """One dispatcher thread sleeps until each arrival and calls submit() (nothing with tok None);
    the futures' callbacks take the ids."""
    lat: list[float] = []
    sums: list[tuple[list[bytes], int]] = []
    failed = 0
    outstanding = len(work)
    lock = threading.Lock()
    all_done = threading.Event()

    def finished(future: Any, due: float, texts: list[bytes]) -> None:
        nonlocal failed, outstanding
        done_at = time.perf_counter()
        # xxh3 in place: ~4 us for 64 KB of ids (zlib.crc32 took 16, charged to every placement)
        digest = _core.checksum(future.result().ids) if future.exception() is None else None
        with lock:
            if digest is None:
                failed += 1
            else:
                lat.append((done_at - (start + due)) * 1e6)
                sums.append((texts, digest))
            outstanding -= 1
            if outstanding == 0:
                all_done.set()

    def submit(i: int) -> None:
        # The future is not kept: the batch (and its slots) goes once its callback has run.
        tok.submit(work[i]).add_done_callback(lambda f, due=arrivals[i], texts=work[i]: finished(f, due, texts))

    cpu0 = _cpu_s()
    start = time.perf_counter() + 0.01
    for i, due in enumerate(arrivals):
        delay = start + due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if tok is not None:
            submit(i)
    if tok is not None:
        all_done.wait(limit_s)
    with lock:  # what ended by now; a late callback must not change it under the caller
        return list(lat), list(sums), failed, time.perf_counter() - start, (_cpu_s() - cpu0) * 1e6


def _open_loop_asyncio(tok: Any, work: list[list[bytes]], arrivals: list[float], limit_s: float) -> OpenLoop:
    """An asyncio server: a timerfd wakes the loop at each arrival, as a request's socket would (the
    loop's own timers round their waits up to milliseconds), and a task per request awaits
    encode_batch_async() (nothing with tok None)."""
    lat: list[float] = []
    sums: list[tuple[list[bytes], int]] = []
    failed = 0
    start = time.monotonic_ns() + 10_000_000
    due = [start + int(a * 1e9) for a in arrivals]

    async def request(i: int) -> None:
        nonlocal failed
        try:
            batch = await tok.encode_batch_async(work[i])
        except Error:
            failed += 1
            return
        lat.append((time.monotonic_ns() - due[i]) / 1e3)
        sums.append((work[i], _core.checksum(batch.ids)))

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        timer = _bench.ArrivalTimer()
        arrived = loop.create_future()
        running: set[asyncio.Task[None]] = set()
        nxt = 0

        def ready() -> None:
            nonlocal nxt
            timer.clear()
            now = time.monotonic_ns()
            while nxt < len(due) and due[nxt] <= now:
                if tok is not None:
                    task = loop.create_task(request(nxt))
                    running.add(task)  # the loop keeps only a weak reference
                    task.add_done_callback(running.discard)
                nxt += 1
            if nxt < len(due):
                timer.set(due[nxt])
            elif not arrived.done():
                loop.remove_reader(timer.fd)
                arrived.set_result(None)

        loop.add_reader(timer.fd, ready)
        timer.set(due[0])
        await arrived
        if running:
            await asyncio.wait(running, timeout=limit_s)

    cpu0 = _cpu_s()
    if due:
        asyncio.run(serve())
    return lat, sums, failed, (time.monotonic_ns() - start) / 1e9, (_cpu_s() - cpu0) * 1e6


def _open_loop_engine(tok: Any, work: list[list[bytes]], arrivals: list[float], limit_s: float) -> OpenLoop:
    """An engine's step loop: every ENGINE_STEP_S it puts the requests that arrived since its last
    step into a BatchQueue and takes the finished ones (nothing with tok None). Between steps it
    sleeps, as an engine runs its model step; latency runs to the step that takes the ids."""
    lat: list[float] = []
    sums: list[tuple[list[bytes], int]] = []
    failed = 0
    queue = tok.queue() if tok is not None else None
    request: dict[int, int] = {}  # ticket -> index of the request
    cpu0 = _cpu_s()
    start = time.perf_counter() + 0.01
    step, nxt = 0, 0
    while nxt < len(arrivals) or (queue is not None and queue.pending and time.perf_counter() - start < limit_s):
        step += 1
        delay = start + step * ENGINE_STEP_S - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        now = time.perf_counter() - start
        while nxt < len(arrivals) and arrivals[nxt] <= now:
            if queue is not None:
                request[queue.put(work[nxt])] = nxt
            nxt += 1
        if queue is None:
            continue
        for ticket, batch in queue.poll():
            i = request.pop(ticket)
            if isinstance(batch, BaseException):
                failed += 1
            else:
                lat.append((time.perf_counter() - start - arrivals[i]) * 1e6)
                sums.append((work[i], _core.checksum(batch.ids)))
    return lat, sums, failed, time.perf_counter() - start, (_cpu_s() - cpu0) * 1e6


def _freeze_heap() -> None:
    """Moves the benchmark's own heap (corpus, payloads, results) out of the garbage collector's
    sight: its full collections took 11-58 ms here, charged to whichever requests they stopped."""
    gc.collect()
    gc.freeze()


def _cores(spec: str | None, default: list[int]) -> list[int]:
    if not spec:
        return default
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def _payloads(quick: bool) -> list[int]:
    return [1024, 8192, 65536] if quick else [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]


def _check(options: Options) -> None:
    load_payloads = options.extra["load_payloads"] or [8192]
    payloads = _payloads(options.quick)
    if any(p not in payloads for p in load_payloads):
        raise BadConfig(f"load payloads {load_payloads}: each must be one of the payload sweep's {payloads}")


def _run(run: Any, env: Any) -> None:
    """The suite's body (harness.Run): single requests, then the load test, per model."""
    from ... import LocalAgent, connect, corpus

    quick, agent, results = run.options.quick, run.options.agent, run.results
    agent_cores, consumer_cores = run.options.extra["agent_cores"], run.options.extra["consumer_cores"]
    models, embed = run.options.extra["models"], run.options.extra["embed"]
    cores = sorted(os.sched_getaffinity(0))
    half = max(1, len(cores) // 2)
    consumer = _cores(consumer_cores, cores[:half] if len(cores) >= 2 else cores)
    agent_side = _cores(agent_cores, cores[half:] if len(cores) >= 2 else cores)
    payloads = _payloads(quick)
    load_payloads = run.options.extra["load_payloads"] or [8192]
    batches = [1, 8] if quick else [1, 4, 8, 16, 32]
    smoke = run.options.smoke  # every cell once and short: a check, not a measurement
    requests = 20 if smoke else 40 if quick else 300
    rates_frac = [0.25, 0.5, 1.0] if quick else [0.25, 0.5, 0.75, 1.0, 1.25, 1.5]
    seconds = 0.2 if smoke else 0.4 if quick else 3.0  # per cell and repetition
    repeats = 1 if smoke else LOAD_REPEATS
    command = ("outboard bench tokenize" + (" --smoke" if smoke else " --quick" if quick else "")
               + f" --models {','.join(models)}"
               + (f" --embed {embed}" if embed != "auto" else "")
               + (f" --load-payloads {','.join(map(str, load_payloads))}" if load_payloads != [8192] else "")
               + f" --agent-cores {','.join(map(str, agent_side))} --consumer-cores {','.join(map(str, consumer))}")
    results.meta.update({
        "consumer_cores": consumer, "agent_cores": agent_side if agent is None else "remote", "models": models,
        "embed_device": None, "command": command,
        "note": "emulated offload: agent and consumer share one noisy VM; ratios, not absolute times",
        "gc": "the benchmark's own heap is frozen (gc.freeze) before each timed phase"})
    text = "\n".join(corpus.build(2_000_000 if quick else 4_000_000))
    pool = Payloads(text)
    words_rng = random.Random(7)

    def corpus_texts(size: int, batch: int) -> list[str]:
        return [pool.take(size // batch) for _ in range(batch)]

    def word_texts(size: int, batch: int) -> list[str]:
        return [random_words(size // batch, words_rng) for _ in range(batch)]

    os.sched_setaffinity(0, set(consumer))
    _freeze_heap()
    local = None
    if agent is None:
        # The agent owns its cores and polls them, as on a DPU: a consumer never has to wake it.
        # The progress thread polls one core; the others tokenize. With one core it tokenizes too.
        threads = str(len(agent_side) - 1)
        args = ["--tokenize-threads", threads, "--spin-us", str(AGENT_POLL_US), "--adaptive-spin=false"]
        local = LocalAgent("--cores", ",".join(map(str, agent_side)), *args).start()
        agent = local.address
        results.meta["agent_args"] = args
    try:
        client = connect(agent)  # default settings: what a user gets is what is measured
        cells = len(models) * (len(payloads) + len(batches) + 1) + len(models) * len(load_payloads) * len(
            rates_frac) * repeats * (len(PLACEMENTS) + len(ASYNCIO_PLACEMENTS) + len(ENGINE_PLACEMENTS) + len(NATIVE_PLACEMENTS))
        bar = run.progress
        bar.expect(cells)
        for model in models:
            embedder = make_embedder(embed, open_local(model).vocab_size)
            results.meta["embed_device"] = embedder.device
            pipe = Pipeline(client, model, embedder)
            if pipe.gpu_absent is not None:
                results.meta.setdefault("gpu_placement_absent", {})[model] = pipe.gpu_absent
            for size in payloads:
                single_requests(results, pipe, model, "corpus", size, 1, requests if size <= 16384 else requests // 3,
                                corpus_texts, lambda: None)
                bar.step(f"{model} single {size} B")
            for b in batches:
                single_requests(results, pipe, model, "corpus", 8192, b, requests, corpus_texts, lambda: None)
                bar.step(f"{model} single batch {b}")
            single_requests(results, pipe, model, "random-words", 8192, 1, requests, word_texts, lambda: None)
            bar.step(f"{model} single random words")
            for size in load_payloads:
                # Requests/s the consumer's cores tokenize back to back: the rates run past it, to saturation.
                fresh = [corpus_texts(size, 1)[0].encode() for _ in range(2 * CALIBRATION_REQUESTS)]  # half a side
                capacity = {"host": len(consumer) * 1e6 / _host_service_us(pipe.tok["host"], fresh[:CALIBRATION_REQUESTS]),
                            "agent": _agent_capacity_rps(pipe.tok["agent"], fresh[CALIBRATION_REQUESTS:])}
                for side, rps in capacity.items():
                    results.meta.setdefault(f"{side}_capacity_rps", {}).setdefault(model, {})[str(size)] = rps
                load_test(results, client, pipe, model, size, [f * capacity["host"] for f in rates_frac], capacity,
                          seconds, corpus_texts, bar.step, repeats)
            for t in pipe.tok.values():
                t.close()
        client.close()
    finally:
        gc.unfreeze()
        if local is not None:
            local.stop()


def _agent_capacity_rps(tok: Any, texts: list[bytes]) -> float:
    """Requests/s the agent tokenizes when it never waits for one: every text submitted at once (after
    a first round that warms it up)."""
    for f in [tok.submit([t]) for t in texts[:len(texts) // 4]]:
        f.result()
    t0 = time.perf_counter()
    for f in [tok.submit([t]) for t in texts]:
        f.result()
    return len(texts) / (time.perf_counter() - t0)


def _host_service_us(tok: Any, texts: list[bytes]) -> float:
    """Median µs of one request tokenized on the host, back to back, as the load test's are (no
    embed between them: its 13 MB of output evicts the tokenizer's tables, so the single-request
    stages run slower than a loaded host does)."""
    times = []
    for text in texts:
        t0 = _now()
        tok.encode_batch([text])
        times.append((_now() - t0) / 1e3)
    return float(np.median(times))


# ---- report

def _single(rows: list[dict[str, Any]], model: str, workload: str = "corpus", payload: int = 8192,
            batch: int = 1) -> dict[str, dict[str, Any]]:
    return {r["impl"]: r for r in rows if r["case"] == "single" and r["params"] == {
        "model": model, "workload": workload, "payload_bytes": payload, "batch": batch}}


def render(rows: list[dict[str, Any]], meta: dict[str, Any], directory: Path | None = None) -> str:
    stages = ("acquire", "tokenize", "transfer", "embed")
    judge = not meta.get("smoke")
    lines = ["# Tokenization offload (`outboard bench tokenize`)", "",
             f"{meta.get('cpu', '?')}, {meta.get('cores', '?')} cores, {meta.get('virtualization', '?')}; "
             f"consumer cores {meta.get('consumer_cores')}, agent cores {meta.get('agent_cores')}; "
             f"embed on {meta.get('embed_device')}. {meta.get('note', '')}.", "",
             f"Reproduce: `{meta.get('command')}` (git {meta.get('git')}).", ""]
    charts = []
    for model in meta.get("models", []):
        cells = _single(rows, model)
        if not cells:
            continue
        lines += [f"## {MODELS.get(model, model)}: one 8 KB request, stages (p50 µs)", "",
                  "| placement | " + " | ".join(stages) + " | total (measured) | consumer CPU | agent CPU | ids differ |",
                  "|---|" + "---|" * (len(stages) + 4)]
        for p, r in cells.items():
            m = r["metrics"]
            lines.append(f"| {p} | " + " | ".join(f"{m[s + '_us']['p50']:.1f}" for s in stages)
                         + f" | {m['total_us']['p50']:.1f} (p99 {m['total_us']['p99']:.1f}) | "
                         f"{m['consumer_cpu_us']['p50']:.1f} | {m['agent_cpu_us']['p50']:.1f} | "
                         f"{r['correctness']['ids_differ']}/{r['correctness']['requests']} |")
        timed = {p: r["metrics"] for p, r in cells.items() if "embed_gpu_us" in r["metrics"]}
        if timed:
            lines += ["", "On the GPU, by CUDA events (p50 µs): " + "; ".join(
                f"{p}: ids' copy {m['copy_gpu_us']['p50']:.1f}, embed kernels {m['embed_gpu_us']['p50']:.1f}"
                for p, m in timed.items()) + ". The rest of transfer and embed above is launches and "
                "synchronisations; the gpu placement's tokenize is its kernels' event time."]
        if model in meta.get("gpu_placement_absent", {}):
            lines += ["", f"No gpu placement: {meta['gpu_placement_absent'][model]}."]
        elif "gpu" in cells:
            lines += ["", "gpu: the text copied to the device and tokenized there (tokenize: the kernels, timed by "
                      "CUDA events; transfer: the rest of the call, the text's copy in and the offsets' copy out with "
                      "the launches and one synchronisation)."]
        lines += ["", "Published (BF3-Bench, **another machine**: BlueField-3 Arm + A100X, greedy not BPE, "
                  "single shot, means): " + "; ".join(
                      f"{p}: " + ", ".join(f"{k} {v} µs" for k, v in PUBLISHED[p].items()) for p in PUBLISHED), ""]
        words = _single(rows, model, "random-words")
        if words:
            lines += ["Published experiment's random-word text, 8 KB, p50 total µs: " + ", ".join(
                f"{p} {r['metrics']['total_us']['p50']:.1f}" for p, r in words.items()), ""]
        shown = [p for p in PLACEMENTS + ("gpu",) if p in cells]
        sizes = sorted({r["params"]["payload_bytes"] for r in rows if r["case"] == "single"
                        and r["params"]["model"] == model and r["params"]["batch"] == 1
                        and r["params"]["workload"] == "corpus"})
        lines += ["| payload | " + " | ".join(f"{p} p50 / p99 µs" for p in shown) + " | tokens |",
                  "|---|" + "---|" * (len(shown) + 1)]
        for size in sizes:
            c = _single(rows, model, payload=size)
            lines.append(f"| {size // 1024} KB | " + " | ".join(
                f"{c[p]['metrics']['total_us']['p50']:.0f} / {c[p]['metrics']['total_us']['p99']:.0f}"
                if p in c else "—" for p in shown) + f" | {c['host']['metrics']['tokens_per_request']:.0f} |")
        batches = sorted({r["params"]["batch"] for r in rows if r["case"] == "single" and r["params"]["model"] == model})
        lines += ["", "| batch (8 KB total) | " + " | ".join(f"{p} p50 µs" for p in shown) + " |",
                  "|---|" + "---|" * len(shown)]
        for b in batches:
            c = _single(rows, model, batch=b)
            lines.append(f"| {b} | " + " | ".join(f"{c[p]['metrics']['total_us']['p50']:.0f}" if p in c else "—"
                                                  for p in shown) + " |")
        for size in _load_payloads(rows, model):
            load = _load_rows(rows, model, size, "load")
            threads = load[0]["params"].get("host_threads")
            lines += ["", f"### Load: Poisson arrivals, {size // 1024} KB, open loop: each request submitted at its "
                      f"arrival (`submit()`; host and auto tokenize on {threads} pool threads), latency from the arrival",
                      "", _rates_note(meta, model, size),
                      "Consumer CPU is the whole process's (getrusage); *net* takes out the load generator's own "
                      "cost per arrival (its sleep and wake-up), measured at each rate on the first part of the same "
                      "schedule with nothing submitted.", ""] + _load_table(load, judge)
            for case, server in (
                    ("load_asyncio", "an asyncio server (a task per request awaits `encode_batch_async()`; agent "
                     "batches finish on the loop, host ones on the pool; a timerfd wakes the loop at each arrival, "
                     "as a request's socket would)"),
                    ("load_engine", "an inference engine's step loop (every {step_ms:g} ms it puts the requests that "
                     "arrived into a `BatchQueue` and takes the finished ones: no thread is woken per request; "
                     "*arrival* here is the step loop's own cost, and latency runs to the step that takes the ids)"),
                    ("load_native", "C++ (a native server's shape; `outboard::RemoteTokenizer` and `Tokenizer` on "
                     "{threads} threads): what the Python layer costs above")):
                shaped = _load_rows(rows, model, size, case)
                if shaped:
                    server = server.format(threads=shaped[0]["params"].get("host_threads"),
                                           step_ms=shaped[0]["params"].get("step_s", ENGINE_STEP_S) * 1e3)
                    lines += ["", f"### The same {size // 1024} KB load from {server}", ""] + _load_table(shaped, judge)
        if directory is not None:
            charts += _charts(rows, model, directory)
        lines.append("")
    for c in charts:
        lines.append(f"![{c.stem}](charts/{c.name})")
    return "\n".join(lines) + "\n"


def _rates_note(meta: dict[str, Any], model: str, size: int) -> str:
    capacity = meta.get("host_capacity_rps", {}).get(model, {}).get(str(size))
    if capacity is None:
        return ""
    agent = meta.get("agent_capacity_rps", {}).get(model, {}).get(str(size))
    return (f"Rates are fractions of the host's capacity, {capacity:.0f} req/s on the consumer's cores "
            f"({CALIBRATION_REQUESTS} requests tokenized back to back before the test), rising to saturation"
            + (f"; the agent's is {agent:.0f} req/s ({CALIBRATION_REQUESTS} requests sent at once)" if agent else "")
            + ". ")


def _load_payloads(rows: list[dict[str, Any]], model: str) -> list[int]:
    return sorted({r["params"]["payload_bytes"] for r in rows if r["case"] == "load" and r["params"]["model"] == model})


def _load_rows(rows: list[dict[str, Any]], model: str, size: int, *cases: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["case"] in cases and r["params"]["model"] == model
            and r["params"]["payload_bytes"] == size]


def _cells(load: list[dict[str, Any]]) -> list[tuple[float, str, list[dict[str, Any]]]]:
    """(offered req/s, placement, its repetitions' rows), by rate then placement."""
    cells: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for r in load:
        cells.setdefault((r["params"]["offered_rps"], r["impl"]), []).append(r)
    order = {p: i for i, p in enumerate(PLACEMENTS)}
    return [(rate, p, rs) for (rate, p), rs in sorted(cells.items(), key=lambda c: (c[0][0], order.get(c[0][1], 9)))]


@dataclass(frozen=True)
class _CpuRatio:
    """A stats.RatioCase: a placement's consumer CPU per request over the host placement's."""

    name: str
    ours: str
    ratio_metric: str
    reference: str = "host"


def _cpu_ratio(rows: list[dict[str, Any]], host: list[dict[str, Any]], net: bool = False) -> Ratio | None:
    """This placement's consumer CPU per request over the host placement's, paired by repetition, from
    the repetitions whose every request ended with the host's ids."""
    case = _CpuRatio(rows[0]["case"], rows[0]["impl"],
                     "consumer_cpu_net_us_per_request" if net else "consumer_cpu_us_per_request")
    return ratio_stats(rows + host, case).get(cell_key(rows[0]["params"]))


def _saturated(rows: list[dict[str, Any]]) -> list[str]:
    """The sides saturated in any repetition of a cell."""
    return sorted({side for r in rows for side in r["metrics"].get("saturated", [])})


def _load_table(load: list[dict[str, Any]], judge: bool = True) -> list[str]:
    """The load cells of one shape; ``judge``: whether the ratios are judged against the goal (not in a smoke run)."""
    lines = ["| offered req/s | placement | throughput req/s | p50 µs | p99 µs | consumer CPU µs/req | arrival | "
             + " | ".join(CPU_PHASES) + " | rest | ÷ host: raw (net) | agent CPU µs/req | doorbells / req | saturated | routed (auto) | "
             "failed | ids differ |", "|" + "---|" * (15 + len(CPU_PHASES))]
    cells = _cells(load)
    host = {rate: rows for rate, p, rows in cells if p == "host"}
    judged: dict[str, list[tuple[float, Ratio]]] = {}
    for rate, p, rows in cells:
        def med(path: str, rows: list[dict[str, Any]] = rows) -> float:
            return median([get(r["metrics"], path) or 0.0 for r in rows])
        total, arrival = med("consumer_cpu_us_per_request"), med("arrival_cpu_us_per_request")
        # the split and what it leaves from the same (first) repetition
        split = [(r["metrics"], x) for r in rows if (x := r["metrics"].get("consumer_cpu_split_us_per_request"))]
        phases = [median([x[ph] for _, x in split]) for ph in CPU_PHASES] if split else None
        rest = median([max(m["consumer_cpu_us_per_request"] - m["arrival_cpu_us_per_request"] - sum(x.values()), 0.0)
                       for m, x in split]) if split else None
        saturated = sorted(set(_saturated(rows)) | set(_saturated(host.get(rate, []))))
        ratio = _cpu_ratio(rows, host.get(rate, [])) if p != "host" else None
        net = _cpu_ratio(rows, host.get(rate, []), net=True) if p != "host" else None
        if ratio and not saturated:
            judged.setdefault(p, []).append((rate, ratio))
        routed: dict[str, int] = {}
        for r in rows:
            for k, v in (r["correctness"].get("routed") or {}).items():
                routed[k] = routed.get(k, 0) + v
        lines.append(
            f"| {rate:.0f} | {p} | {med('throughput_rps'):.0f} | {med('latency_us.p50'):.0f} | "
            f"{med('latency_us.p99'):.0f} | {total:.1f} | {arrival:.1f} | "
            + (" | ".join(f"{v:.1f}" for v in phases) + f" | {rest:.1f}"
               if phases else " | ".join("—" for _ in CPU_PHASES) + " | —")
            + " | " + (f"{ratio.median:.2f} ({net.median:.2f}) [{ratio.low:.2f}–{ratio.high:.2f}]"
                       + (" not judged" if saturated else "") if ratio and net else "—")
            + f" | {med('agent_cpu_us_per_request'):.1f} | "
            + (f"{med('doorbells_per_request'):.2f}" if p != "host" else "—")
            + f" | {', '.join(saturated) or '—'} | {routed or ''} | "
            f"{sum(r['correctness']['failed'] for r in rows)} | {sum(r['correctness']['ids_differ'] for r in rows)} |")
    lines += ["", f"Consumer CPU per request: *arrival* is the load generator's own wake-up (both placements pay it); "
              f"in the first repetition, an agent request's *submit* (sending it), *wait* (the sleep and wake-up of the thread that takes "
              f"answers), *completion* (the answer to the caller) and the *rest* (Python's routing and futures, "
              f"the event loop). *Doorbells / req*: how often the agent woke a sleeping consumer, per request (one "
              f"wake-up takes every answer that came meanwhile). Ratios: median of "
              f"{max(len(rows) for _, _, rows in cells)} interleaved "
              f"repetitions [lowest–highest]; judged "
              f"only where neither side is saturated (offered ≥ {SATURATED_SHARE:.0%} of its capacity, or "
              f"throughput {SHORTFALL_SHARE:.0%} short of the offered rate)."]
    if not judge:
        return lines
    for p in dict.fromkeys(p for _, p, _ in cells if p != "host"):
        points = judged.get(p)
        if not points:
            lines.append(f"- **{p} ÷ host, raw**: every rate saturated a side, so no ratio is judged "
                         f"against the goal ≤ {CPU_RATIO_GOAL:.2f}")
            continue
        rate, worst = max(points, key=lambda x: x[1].median)
        lines.append(f"- **{p} ÷ host, raw**, worst unsaturated rate ({rate:.0f} req/s): {worst.median:.2f} "
                     f"[{worst.low:.2f}–{worst.high:.2f}]; goal ≤ {CPU_RATIO_GOAL:.2f}: "
                     f"{worst.verdict(CPU_RATIO_GOAL, lower_is_better=True)} "
                     f"({sum(r.verdict(CPU_RATIO_GOAL, True) == 'met' for _, r in points)} of {len(points)} rates met)")
    return lines


def _charts(rows: list[dict[str, Any]], model: str, directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = directory / "charts"
    out.mkdir(exist_ok=True)
    paths: list[Path] = []

    def save(fig: Any, chart: str) -> None:
        paths.append(out / f"{model}-{chart}.png")
        fig.savefig(paths[-1], dpi=100, bbox_inches="tight")
        plt.close(fig)

    cells = _single(rows, model)
    fig, ax = plt.subplots(figsize=(6, 4))
    bottom = np.zeros(len(cells))
    for stage in ("acquire", "tokenize", "transfer", "embed"):
        vals = np.array([cells[p]["metrics"][f"{stage}_us"]["p50"] for p in cells])
        ax.bar(list(cells), vals, bottom=bottom, label=stage)
        bottom += vals
    ax.set_ylabel("µs (p50)")
    ax.set_title(f"{model}: 8 KB request, stages")
    ax.legend()
    save(fig, "stages")

    fig, ax = plt.subplots(figsize=(6, 4))
    for p in PLACEMENTS:
        pts = sorted((r["params"]["payload_bytes"], r["metrics"]["total_us"]["p50"]) for r in rows
                     if r["case"] == "single" and r["impl"] == p and r["params"]["model"] == model
                     and r["params"]["batch"] == 1 and r["params"]["workload"] == "corpus")
        ax.plot([x / 1024 for x, _ in pts], [y for _, y in pts], marker="o", label=p)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("payload KB")
    ax.set_ylabel("total µs (p50)")
    ax.set_title(f"{model}: latency vs payload")
    ax.legend()
    save(fig, "payload")

    for size in _load_payloads(rows, model):
        load = _load_rows(rows, model, size, "load", "load_asyncio", "load_engine", "load_native")
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        shapes = {"load": (PLACEMENTS, dict(marker="o"), ""),
                  "load_asyncio": (ASYNCIO_PLACEMENTS, dict(marker="s", linestyle=":"), " (asyncio)"),
                  "load_engine": (ENGINE_PLACEMENTS, dict(marker="^", linestyle="-."), " (step loop)"),
                  "load_native": (NATIVE_PLACEMENTS, dict(marker="x", linestyle="--"), " (C++)")}
        for case, p in [(case, p) for case, (places, _, _) in shapes.items() for p in places]:
            pts = [tuple(median([get(r["metrics"], m) or 0.0 for r in rows]) for m in (
                "throughput_rps", "latency_us.p99", "consumer_cpu_us_per_request")) + (rate,)
                   for rate, impl, rows in _cells([r for r in load if r["case"] == case]) if impl == p]
            style = dict(shapes[case][1], label=p + shapes[case][2])
            a1.plot([x[0] for x in pts], [x[1] for x in pts], **style)
            a2.plot([x[3] for x in pts], [x[2] for x in pts], **style)
        a1.set_xlabel("throughput req/s")
        a1.set_ylabel("p99 latency µs")
        a1.set_yscale("log")
        a1.set_title(f"{size // 1024} KB: throughput vs p99")
        a2.set_xlabel("offered req/s")
        a2.set_ylabel("consumer CPU µs / request")
        a2.set_title(f"{size // 1024} KB: consumer CPU per request")
        a1.legend()
        save(fig, f"load-{size // 1024}KB")
    return paths


def brief(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The run in ten seconds, for the terminal: per model and placement, one 8 KB request's p50 and
    the consumer's CPU for it, and how many requests (every one of the run, the load test's too)
    gave ids that differ from the host placement's."""
    lines = [f"Tokenization offload: consumer cores {meta.get('consumer_cores')}, agent cores "
             f"{meta.get('agent_cores')}, embed on {meta.get('embed_device')}. One 8 KB request, p50:", "",
             f"{'model':<20} {'placement':<10} {'8 KB p50 µs':>12} {'consumer CPU µs/req':>20}  ids differ"]
    for model in meta.get("models", []):
        for placement, r in _single(rows, model).items():
            m = r["metrics"]
            mine = [x for x in rows if x["impl"] == placement and x["params"].get("model") == model]
            differ = sum(x["correctness"].get("ids_differ", 0) for x in mine)
            requests = sum(x["correctness"].get("requests", 0) for x in mine)
            lines.append(f"{model:<20} {placement:<10} {m['total_us']['p50']:>12.1f} "
                         f"{m['consumer_cpu_us']['p50']:>20.1f}  {differ} of {requests} requests")
    return "\n".join(lines)


def _models(text: str) -> list[str]:
    models = text.split(",")
    if unknown := [m for m in models if m not in MODELS]:
        raise BadConfig(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    return models


SUITE = Suite(
    name="tokenize", title="Tokenization offload", body=_run, check=_check, render=render, brief=brief,
    help="tokenization offload: host vs agent vs auto, stages and load", quick_help="a short run (about three minutes)",
    options=[Option("--agent-cores", "cores for the local agent (default: the upper half)"),
             Option("--consumer-cores", "cores for this process (default: the lower half)"),
             Option("--models", "any of gpt2, cl100k_base, bert-base-uncased, comma-separated", default=DEFAULT_MODELS,
                    parse=_models),
             Option("--load-payloads", "payloads of the load test, each one of the payload sweep's (default 8192)",
                    parse=numbers("--load-payloads"), metavar="BYTES,..."),
             Option("--embed", "where the embedding lookup runs: torch on CUDA when present (auto), or numpy on the CPU",
                    default="auto", choices=("auto", "numpy", "torch"))])
