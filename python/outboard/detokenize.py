"""Streaming detokenization on the agent: a server generating text sends each sequence's new ids and
gets back the text they complete. Each sequence's decode state (the bytes of a character begun and not
yet ended, whether its leading space is still to drop) lives on the agent, so the server's CPU only
copies strings; one round trip steps every sequence of a generation step.

The host equivalent is ``Tokenizer.decode_stream()``: the same text, step for step. The client is
C++ (``outboard/detokenize_client.h``); this is its Python face."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import _core
from .errors import Error, InvalidArgument, TimedOut, TooBig, from_code
from .offload.inflight import InFlight

Steps = Sequence[tuple[int, Sequence[int] | np.ndarray]]
# Submitted steps whose results were not taken, at most: a server that loses its tickets fails at
# submit instead of holding their texts without end.
MAX_UNTAKEN_STEPS = 4096


class Detokenizer:
    """One vocabulary on an agent's ``detokenize`` service. Made by ``Client.detokenizer(name)``; ``name``
    as for ``Client.tokenizer``: a name the agent resolves in its vocabulary directory, or a path of this
    machine's (a ``Path``, or a name with a "/"), whose bytes the agent is sent. One thread at a time.

    ``submit`` and ``result`` pipeline it: a server sends a generation step's ids, runs its next step
    while the agent decodes them, then takes their text, already there, with no wait."""

    def __init__(self, conn: _core.Connection, name: str | Path, *, timeout: float) -> None:
        self._timeout = timeout
        # A Path is a file of this machine whatever its form: absolute, it holds the "/" that says so.
        self._remote = _core.RemoteDetokenizer.open(conn, str(name.absolute()) if isinstance(name, Path) else name,
                                                    timeout)
        self.vocab_size = self._remote.vocab_size
        self._inflight = InFlight(conn, _core.StepCompletions(conn), _texts)
        self._answers: dict[int, list] = {}  # by ticket: empty until answered, then [texts or error]

    def stream(self) -> int:
        """A new sequence's stream: a handle for ``step``, made here (its first step begins it on the
        agent). Closed by a finishing step or ``close``."""
        return self._remote.open_stream()

    def close(self, stream: int) -> None:
        """Closes a stream without its held bytes (an abandoned sequence)."""
        self._remote.close_stream(stream, self._timeout)

    def step(self, steps: Steps, *, finish: Sequence[bool] | bool = False) -> list[str | Error]:
        """For each ``(stream, ids)``, the text those ids complete; with ``finish`` (one flag, or one per
        step) also what the stream held back (U+FFFD for a broken character), and the stream is closed.
        A step that fails (an unknown id or stream) is its error, in its place, and leaves its stream as
        it was; the others go on. An int32 array of ids is sent without a copy into Python objects."""
        return _texts(self._remote.step(steps, finish_flags(steps, finish), self._timeout))

    def submit(self, steps: Steps, *, finish: Sequence[bool] | bool = False) -> int:
        """As ``step``, without waiting for the answer: a ticket for ``result``. Steps run on the agent
        in the order they are submitted; a request refused (a bad step, a lost connection) fails at
        its result. At most MAX_UNTAKEN_STEPS whose results were not taken (TooBig past it)."""
        if len(self._answers) >= MAX_UNTAKEN_STEPS:
            raise TooBig(f"detokenize: {len(self._answers)} submitted steps whose results were not taken, the "
                         f"limit MAX_UNTAKEN_STEPS; take them with result()")
        flags = finish_flags(steps, finish)
        answer: list = []
        ticket = self._inflight.expect(answer.append)
        self._answers[ticket] = answer
        self._inflight.send(ticket, self._remote, steps, flags, self._timeout)
        return ticket

    def result(self, ticket: int, *, wait: bool = True) -> list[str | Error] | None:
        """What ``step`` would have returned for the submitted ``ticket``; without ``wait``, None while
        it has not come. Raises where the request failed (the connection, the timeout)."""
        answer = self._answers.get(ticket)
        if answer is None:
            raise InvalidArgument(f"detokenize step {ticket} was not submitted, or its result was taken")
        deadline = time.monotonic() + self._timeout  # the request's own deadline comes first
        while not answer:
            self._inflight.collect(max(0.0, deadline - time.monotonic()) if wait else 0.0)
            if not answer and not wait:
                return None
            if not answer and time.monotonic() >= deadline:
                raise TimedOut(f"detokenize step {ticket}: no answer within {self._timeout} s")
        del self._answers[ticket]
        if isinstance(answer[0], BaseException):
            raise answer[0]
        return answer[0]


def finish_flags(steps: Steps, finish: Sequence[bool] | bool) -> list[bool]:
    """One finish flag per step, from one for all or one each."""
    flags = [finish] * len(steps) if isinstance(finish, bool) else list(finish)
    if len(flags) != len(steps):
        raise InvalidArgument(f"{len(flags)} finish flags for {len(steps)} steps")
    return flags


def _texts(answer: list) -> list[str | Error]:
    return [t if isinstance(t, str) else from_code(*t) for t in answer]
