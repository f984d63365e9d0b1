"""Agent requests in flight on one connection: the one completion mechanism under every way of
waiting for them (tokenize batches, detokenize steps)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

from .. import _core
from ..errors import Again, Error, from_code
from .batch import Batch


@dataclass
class CpuSplit:
    """This process's CPU (ns, thread time) on agent batches, by phase, while measure_cpu() runs:
    sending them, waiting in collect() for their answers (the sleep and the wake-up), and handing
    the answers out (building each Batch, running its sink)."""

    submit_ns: int = 0
    wait_ns: int = 0
    completion_ns: int = 0


Sink = Callable[[Any], None]  # takes a request's result (what ``result`` made of it) or its error

_measured: CpuSplit | None = None  # off by default: a clock read costs ~0.6 us here


def _clock(split: CpuSplit | None) -> int:
    """This thread's CPU time while measure_cpu() runs, else 0 (no clock read)."""
    return time.thread_time_ns() if split else 0


@contextmanager
def measure_cpu() -> Iterator[CpuSplit]:
    """Counts every InFlight's CPU by phase while the block runs (a benchmark's breakdown): each call
    that begins and ends inside it (a collector's wait that outlasts the block is left out whole)."""
    global _measured
    _measured = split = CpuSplit()
    try:
        yield split
    finally:
        _measured = None


class InFlight:
    """Requests sent to the agent and not yet answered, over one native completions object: by default
    a ``_core.Completions`` of tokenize batches, whose results ``result`` makes Batches; the
    detokenizer's is a ``_core.StepCompletions``. A failed request's (code, message) becomes its Error.

    A blocking call, submit()'s futures, an event loop and a BatchQueue are each a view of one of
    these: a batch is expected with a sink, sent, and whoever takes the answers (collect(), which
    waits driving the connection, or take() after progressing it oneself) hands each to its sink on
    the taking thread. One thread takes the answers of an InFlight (a second would not be woken by
    the first's): each view owns its own. Thread mode: multi for expect, send and drop."""

    def __init__(self, connection: _core.Connection, native: Any = None,
                 result: Callable[[Any], Any] = Batch.from_agent) -> None:
        self.connection = connection
        self._native = _core.Completions(connection) if native is None else native
        self._result = result
        self._lock = threading.Lock()
        self._sinks: dict[int, Sink] = {}
        self._next_token = 0

    def __len__(self) -> int:
        """Batches expected and not yet answered."""
        return len(self._sinks)

    def expect(self, sink: Sink) -> int:
        """A token to send a batch under, whose answer will go to ``sink``."""
        with self._lock:
            token, self._next_token = self._next_token, self._next_token + 1
            self._sinks[token] = sink
        return token

    def send(self, token: int, remote: Any, *args: Any, **keywords: Any) -> None:
        """Sends the request expected under ``token``: ``remote.submit(completions, token, *args,
        **keywords)``, whose ``timeout`` bounds it until its answer. A refusal goes to its sink at once,
        but for Again (a tokenizer's without ``wait_credit``: the agent's window is full, nothing was
        sent), which is raised with the request still expected, to be sent again."""
        split = _measured
        t0 = _clock(split)
        try:
            remote.submit(self._native, token, *args, **keywords)
        except Again:
            raise
        except Exception as e:  # refused (a lost connection, a bad text): nothing was sent
            self._hand_out([(token, e)])
        except BaseException:
            self.drop(token)
            raise
        finally:
            if split and split is _measured:
                split.submit_ns += _clock(split) - t0

    def drop(self, token: int) -> bool:
        """Forgets a batch whose caller gave up: its answer goes nowhere. False if it was answered."""
        with self._lock:
            return self._sinks.pop(token, None) is not None

    def collect(self, timeout: float) -> int:
        """Hands out the answers that came in, waiting up to ``timeout`` s (driving the connection) for
        one; how many."""
        split = _measured
        t0 = _clock(split)
        ready = self._native.collect(timeout)
        t1 = _clock(split)
        handed = self._hand_out_native(ready)
        if split and split is _measured:
            split.wait_ns += t1 - t0
            split.completion_ns += _clock(split) - t1
        return handed

    def take(self) -> int:
        """collect() for whoever progressed the connection itself: what is ready, never waiting."""
        split = _measured
        t0 = _clock(split)
        handed = self._hand_out_native(self._native.take())
        if split and split is _measured:
            split.completion_ns += _clock(split) - t0
        return handed

    def fail_all(self, error: Error) -> None:
        """Every batch expected fails with ``error`` (nothing would ever answer them)."""
        with self._lock:
            tokens = list(self._sinks)
        self._hand_out([(token, error) for token in tokens])

    def _hand_out_native(self, ready: list[tuple[int, bool, Any]]) -> int:
        return self._hand_out([(token, self._result(answer) if ok else from_code(*answer))
                               for token, ok, answer in ready]) if ready else 0

    def _hand_out(self, answers: list[tuple[int, Any]]) -> int:
        handed = 0
        for token, answer in answers:
            with self._lock:
                sink = self._sinks.pop(token, None)
            if sink is not None:  # None: its caller gave up on it
                sink(answer)
                handed += 1
        return handed
