"""The ``auto`` placement's routing: per batch, the host or the agent, from what it measured."""

from __future__ import annotations

import math
import os
import threading
import time

from ..errors import ConnectionReset, NotConnected, ShutDown, TimedOut
from .batch import Batch

#: Errors after which the agent is presumed gone: auto stops routing to it.
AGENT_DOWN = (ConnectionReset, NotConnected, ShutDown, TimedOut)


class AutoPolicy:
    """Routes each batch to the host or the agent from what it measured.

    Per placement it keeps an exponentially weighted service time per input byte, from the batches
    that went there (queueing left out: the agent reports its own, and host batches are timed on
    their pool thread). The agent's estimate grows with the batches this process has in flight to it
    (its queue, drained by ``agent_workers`` tokenize threads; the agent reports how many), but only
    by the part of each that the agent reports working (tokenizing, putting the ids): the transfer
    and this process's side of a batch overlap other batches. The host's estimate grows with its
    batches on the host (drained by at most ``host_workers``, the tokenizer's submit pool) and
    with this process's CPU use (a busy consumer tokenizes slowly and delays its own work). The
    agent is chosen while its estimate is within ``slack`` of the host's: offloading is preferred
    because it frees the consumer's CPU, unless the agent is clearly slower (saturated) — then
    batches spill to the host. A failed agent sends everything to the host for ``retry_after``
    seconds. A placement that has not answered for ``explore_after`` seconds, and has none of our
    batches, gets the next one: the first batches explore each placement, and an estimate never
    goes stale while the other placement takes everything (a burst before both have answered is
    shared by queue length). Thread mode: multi.
    """

    def __init__(self, *, slack: float = 1.5, weight: float = 0.2, retry_after: float = 1.0,
                 explore_after: float = 0.5) -> None:
        self.slack = slack
        self.weight = weight
        self.retry_after = retry_after
        self.explore_after = explore_after
        self._lock = threading.Lock()
        self._ns_per_byte: dict[str, float] = {}
        self._agent_work_per_byte = 0.0  # the part of the agent's estimate that it reports working
        self._measured: dict[str, float] = {}  # placement -> when it last answered
        self._in_flight = {"host": 0, "agent": 0}
        self._agent_down_until = 0.0
        #: The agent's tokenize threads (what it announced), and the threads of host batches.
        self.agent_workers = 1
        self.host_workers = 4
        self._cpu = (time.process_time(), time.perf_counter())
        self._busy = 0.0  # share of one core this process used lately
        self._cores = max(1, len(os.sched_getaffinity(0)))  # refreshed with _busy, not per batch
        self.routed = {"host": 0, "agent": 0}

    def choose(self, nbytes: int) -> str:
        with self._lock:
            self._sample_cpu()
            now, cores = time.monotonic(), self._cores
            agent_queue = self._in_flight["agent"] / self.agent_workers
            host_queue = self._in_flight["host"] / min(cores, self.host_workers)
            # A placement not heard from lately gets one batch, so its estimate never goes stale.
            stale = [p for p in ("agent", "host") if self._in_flight[p] == 0
                     and now - self._measured.get(p, -math.inf) >= self.explore_after]
            if now < self._agent_down_until:
                choice = "host"
            elif stale:
                choice = stale[0]
            elif len(self._ns_per_byte) < 2:  # a burst before both have answered: by queue length
                choice = "agent" if agent_queue <= host_queue else "host"
            else:
                agent = self._ns_per_byte["agent"] + self._agent_work_per_byte * agent_queue
                host = self._ns_per_byte["host"] * (1 + host_queue) / max(0.1, 1 - self._busy / cores)
                choice = "agent" if agent <= self.slack * host else "host"
            self._count(choice)
            return choice

    def done(self, placement: str, nbytes: int, seconds: float, failed: BaseException | None = None, *,
             work_s: float | None = None) -> None:
        """A batch ended: ``seconds`` of service (queueing left out); for the agent, ``work_s`` of
        them it reports working on the batch (default: all)."""
        with self._lock:
            self._in_flight[placement] -= 1
            if failed is not None:
                if placement == "agent" and isinstance(failed, AGENT_DOWN):
                    self._agent_down_until = time.monotonic() + self.retry_after
                return
            now, last = time.monotonic(), self._measured.get(placement, -math.inf)
            self._measured[placement] = now
            # A first or an old estimate is replaced, not averaged.
            replace = placement not in self._ns_per_byte or now - last >= self.explore_after

            def blend(old: float, spent_s: float) -> float:
                new = spent_s * 1e9 / max(nbytes, 1)
                return new if replace else old + self.weight * (new - old)

            self._ns_per_byte[placement] = blend(self._ns_per_byte.get(placement, 0.0), seconds)
            if placement == "agent":
                work_s = seconds if work_s is None else min(work_s, seconds)
                self._agent_work_per_byte = blend(self._agent_work_per_byte, work_s)

    def agent_answered(self, nbytes: int, batch: Batch, sent: float | None) -> None:
        """An agent batch's service: its latency since ``sent`` (a perf_counter time) less the agent's
        own queue (counted here), and the part the agent reports working (tokenizing, putting the
        ids). A batch a poll took (``sent`` None) ended some time before that poll, unknown: its
        service is the work alone."""
        timing = batch.agent
        work_s = (timing["tokenize_ns"] + timing["put_ns"]) / 1e9 if timing else None
        seconds = (time.perf_counter() - sent - timing.get("queue_ns", 0) / 1e9 if sent is not None
                   else work_s or 0.0)
        self.done("agent", nbytes, seconds, work_s=work_s)

    def agent_failed(self, nbytes: int, failed: BaseException) -> bool:
        """An agent batch failed as a whole (or its caller gave up on it); True when it is to be
        redone on the host, where it is then counted: the agent is presumed down."""
        self.done("agent", nbytes, 0.0, failed)
        if not isinstance(failed, AGENT_DOWN):
            return False
        with self._lock:
            self._count("host")
        return True

    def _count(self, placement: str) -> None:
        self._in_flight[placement] += 1
        self.routed[placement] += 1

    def _sample_cpu(self) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        if wall - self._cpu[1] >= 0.05:
            busy = (cpu - self._cpu[0]) / (wall - self._cpu[1])
            self._busy += 0.5 * (busy - self._busy)
            self._cores = max(1, len(os.sched_getaffinity(0)))
            self._cpu = (cpu, wall)
