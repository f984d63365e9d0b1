"""asyncio: agent batches finished on the event loop itself, no thread hand-off per batch."""

from __future__ import annotations

import asyncio
import collections
import time
import weakref
from collections.abc import Callable

from .. import _core
from ..errors import Again, Error, TimedOut
from .batch import Batch, Finish, HostRunner, Options, Outcome, Text
from .inflight import InFlight

#: Seconds between an event loop's checks of its agent batches' deadlines and of the agent's
#: liveness, while it has any (events wake it at once; these need the clock).
LOOP_WATCH_S = 0.05


class LoopCompletions:
    """The agent batches of one event loop, finished on the loop: it watches the channel's event fd
    while any are out (and LOOP_WATCH_S after: registering it per batch would cost more than the
    batch), and progresses the connection itself when that is readable. One per loop and event fd,
    because the fd is the process's channel hub, shared by every connection. Thread mode: the
    loop's thread only."""

    _of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, LoopCompletions]] = (
        weakref.WeakKeyDictionary())

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop, connection: _core.Connection) -> LoopCompletions:
        per_fd = cls._of.setdefault(loop, {})
        fd = connection.event_fd
        if fd not in per_fd:
            per_fd[fd] = cls(loop, connection)
        return per_fd[fd]

    def __init__(self, loop: asyncio.AbstractEventLoop, connection: _core.Connection) -> None:
        self.loop = loop
        self.connection = connection
        self.fd = connection.event_fd
        self.inflight = InFlight(connection)
        #: Batches waiting for credit, in line. One at a time retries (waking all at each answer cost
        #: O(waiting) failed sends per answer: 2.8x the host's CPU in overload).
        self.credit: collections.deque[_Job] = collections.deque()
        self.watch: asyncio.TimerHandle | None = None
        self.busy_at = time.monotonic()  # when a batch last started or ended
        self.waits_for_credit = 0  # times a batch found the agent's window full

    def start(self, job: _Job) -> None:
        """Sends a batch, or puts it in line for credit when the agent's window is full (never waits:
        credit comes back with the agent's next answers)."""
        self.busy_at = time.monotonic()
        job.token = self.inflight.expect(job.finish)
        if not self._send(job):
            self.credit.append(job)

    def cancel(self, job: _Job) -> None:
        """The caller gave up on a batch: it ends now (CancelledError), and its answer is dropped."""
        if job.token is not None:
            self.inflight.drop(job.token)
        job.finish(asyncio.CancelledError())  # nothing if it had ended; it leaves the credit line lazily

    def _send(self, job: _Job) -> bool:
        """False when the agent's window is full (the batch still expected, to be sent again)."""
        assert job.token is not None
        try:
            self.inflight.send(job.token, job.remote, job.texts, **job.options.keywords(),
                               timeout=max(job.deadline - time.monotonic(), 0.0), wait_credit=False)
        except Again:
            self.waits_for_credit += 1
            return False
        finally:
            self._watch()
        return True

    def _watch(self) -> None:
        if self.watch is None:
            self.loop.add_reader(self.fd, self._ready)
            self.watch = self.loop.call_later(LOOP_WATCH_S, self._tick)

    def _tick(self) -> None:
        self.credit = collections.deque(job for job in self.credit if not job.over)
        now = time.monotonic()
        if not len(self.inflight) and not self.credit and now - self.busy_at >= LOOP_WATCH_S:
            self._unwatch()  # idle for a while: let go of the fd and the connection
            del self._of[self.loop][self.fd]
            return
        # Request deadlines and the agent's liveness are checked every 16th round of progress.
        for _ in range(16):
            self.connection.progress()
        for job in self.credit:
            if job.deadline <= now:
                self._no_credit(job)
        self.watch = self.loop.call_later(LOOP_WATCH_S, self._tick)
        self._ready()

    def _ready(self) -> None:
        for _ in range(64):  # then let the loop's other work in, and come back
            try:
                armed = self.connection.arm()  # False: it progressed and found work
            except Error as e:  # the fd cannot be armed: nothing of ours would ever finish
                return self._fail_all(e)
            if self.inflight.take():
                self.busy_at = time.monotonic()
            if armed:
                break
        else:
            self.loop.call_soon(self._ready)
        self._next_for_credit()  # what came in may have returned credit

    def _next_for_credit(self) -> None:
        """Sends the batches in line while there is credit: the first that finds none keeps its place
        at the head of the line (cancelled ones leave it). While the agent has returned no message
        credit the head is not even tried: the loop wakes for much else (every LOOP_WATCH_S, other
        connections' events), and a failed send per wake-up added up under load."""
        while self.credit:
            job = self.credit[0]
            if not job.over and job.deadline <= time.monotonic():
                self._no_credit(job)
            if not job.over:
                if job.connection.send_credits == 0 and job.connection.is_open:
                    return
                if not self._send(job):
                    return
            self.credit.popleft()

    def _no_credit(self, job: _Job) -> None:
        assert job.token is not None
        self.inflight.drop(job.token)
        job.finish(TimedOut(f"batch of {len(job.texts)} texts: no credit from the agent within the timeout of "
                            f"{job.timeout:g} s (its window stayed full of batches)"))

    def _fail_all(self, error: Error) -> None:
        self.inflight.fail_all(error)  # the batches in line for credit are expected too
        self.credit.clear()

    def _unwatch(self) -> None:
        if self.watch is not None:
            self.loop.remove_reader(self.fd)
            self.watch.cancel()
            self.watch = None


class _Job:
    """One agent batch of an event loop, from its send (or its wait for credit) to its answer."""

    def __init__(self, connection: _core.Connection, remote: _core.RemoteTokenizer, texts: list[Text],
                 options: Options, timeout: float, answered: Finish) -> None:
        self.connection = connection
        self.remote = remote
        self.texts = texts
        self.options = options
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.answered = answered
        self.token: int | None = None
        self.over = False

    def finish(self, outcome: Outcome) -> None:
        """The batch ended; the first outcome counts (an answer after its caller gave up does not)."""
        if not self.over:
            self.over = True
            self.answered(outcome)


class LoopRoute:
    """How one awaited batch runs on the loop ``loop``: the agent's through the loop's
    LoopCompletions, the host's on the tokenizer's pool, its outcome handed over on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, connection: _core.Connection | None,
                 remote: _core.RemoteTokenizer | None, timeout: float, on_pool: HostRunner) -> None:
        self.loop = loop
        self._connection = connection
        self._remote = remote
        self._timeout = timeout
        self._on_pool = on_pool
        self._job: tuple[LoopCompletions, _Job] | None = None

    def host(self, work: Callable[[], Batch], finish: Finish) -> None:
        self._on_pool(work, lambda outcome: self.loop.call_soon_threadsafe(finish, outcome))

    def agent(self, texts: list[Text], options: Options, answered: Finish) -> None:
        assert self._connection is not None and self._remote is not None
        completions = LoopCompletions.of(self.loop, self._connection)
        job = _Job(self._connection, self._remote, texts, options, self._timeout, answered)
        self._job = (completions, job)
        completions.start(job)

    def cancel(self) -> None:
        """The awaiting task was cancelled: an agent batch out ends now (a host batch runs on)."""
        if self._job is not None:
            completions, job = self._job
            completions.cancel(job)
