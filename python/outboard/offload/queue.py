"""BatchQueue: batches a serving loop puts now and polls finished, no thread woken per batch."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Literal

from ..tokenizer import Utf8Policy
from .batch import Batch, Finish, Options, Outcome, Text
from .inflight import InFlight

if TYPE_CHECKING:  # only for annotations: the tokenizer imports this module
    from .tokenizer import OffloadTokenizer

#: Longest a BatchQueue.poll() that waits blocks on the agent alone while host batches are out too.
POLL_SLICE_S = 0.001
#: Most rounds of progress one BatchQueue.poll() makes: then the caller's loop goes on.
POLL_ROUNDS = 256


class BatchQueue:
    """Batches put now and taken, finished, by the caller's own loop: the shape of an inference
    engine's step loop, which takes whatever was tokenized when it comes round. No thread is woken
    per batch: poll() finishes agent batches itself (it progresses the connection, and with it the
    batches' deadlines and the agent's liveness), host batches run on the submit pool. ``auto``
    routes each batch as submit() does, and redoes it on the host if the agent fails. Nothing
    finishes an agent batch between polls. One thread uses a queue; a tokenizer may have several.

        queue = tok.queue()
        ticket = queue.put(texts)
        for ticket, batch in queue.poll():         # at each step; poll(timeout) waits for one
            ...                                    # a Batch, or the Error that failed the batch
    """

    def __init__(self, tok: OffloadTokenizer) -> None:
        self._tok = tok
        self._inflight = InFlight(tok._connection) if tok._remote is not None and tok._connection is not None else None
        #: Finished and not yet returned by poll(): agent batches poll() or put() took, host ones.
        self._finished: list[tuple[int, Outcome]] = []
        self._host_out = 0
        self._ready = threading.Condition()  # reentrant: a host batch's end counts and queues it at once
        self._next_ticket = 0
        self._returned = 0

    @property
    def pending(self) -> int:
        """Batches put and not yet returned by poll()."""
        with self._ready:
            return self._next_ticket - self._returned

    def put(self, texts: Sequence[Text], *, max_len: int | None = None,
            allowed_special: Literal["all"] | Collection[str] = (), utf8: Utf8Policy = "strict",
            add_special_tokens: bool = False, capacity: int | None = None) -> int:
        """Starts a batch (options as in encode_batch()); poll() returns it with this ticket. Waits
        only when the agent's window is full, progressing the connection meanwhile."""
        tok = self._tok
        options = tok._options(max_len, allowed_special, utf8, add_special_tokens, capacity)
        with self._ready:
            ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
        if tok.policy is not None and tok.placement == "auto":
            # The policy counts agent batches out until they are taken: take those already answered.
            self._take_agent(0.0)
        tok._route(list(texts), options, functools.partial(self._done, ticket), host=self._on_host,
                   agent=self._to_agent, answers_on_time=False)
        return ticket

    def poll(self, timeout: float = 0.0) -> list[tuple[int, Batch | BaseException]]:
        """The batches finished since the last poll, each once: (ticket, Batch), or (ticket, the
        error that failed the whole batch). With ``timeout``, waits up to that many seconds for one."""
        deadline = time.monotonic() + timeout
        wait = 0.0
        while True:
            self._take_agent(wait)
            with self._ready:
                finished, self._finished = self._finished, []
                self._returned += len(finished)
            left = deadline - time.monotonic()
            if finished or left <= 0 or not self.pending:
                return finished
            if self._agent_out:  # the agent's answers wake the connection; host ones are checked between slices
                wait = min(left, POLL_SLICE_S) if self._host_out else left
            else:
                with self._ready:
                    self._ready.wait_for(lambda: bool(self._finished), left)
                wait = 0.0

    @property
    def _agent_out(self) -> int:
        return len(self._inflight) if self._inflight is not None else 0

    def _take_agent(self, wait: float) -> None:
        inflight = self._inflight
        if inflight is None or not len(inflight):
            return
        if wait > 0:
            inflight.collect(wait)
        else:
            # One round takes only some of what came in: a loop polling now and then falls behind.
            inflight.connection.progress_until_idle(POLL_ROUNDS)
            inflight.take()

    def _to_agent(self, texts: list[Text], options: Options, answered: Finish) -> None:
        assert self._inflight is not None and self._tok._remote is not None
        self._inflight.send(self._inflight.expect(answered), self._tok._remote, texts, **options.keywords(),
                            timeout=self._tok.timeout)

    def _on_host(self, work: Callable[[], Batch], finish: Finish) -> None:
        with self._ready:
            self._host_out += 1

        def done(outcome: Outcome) -> None:
            with self._ready:
                self._host_out -= 1
                finish(outcome)
        self._tok._on_pool(work, done)

    def _done(self, ticket: int, outcome: Outcome) -> None:
        with self._ready:  # returned by the next poll
            self._finished.append((ticket, outcome))
            self._ready.notify()
