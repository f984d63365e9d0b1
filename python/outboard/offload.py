"""Tokenization offload: exact ids from the agent, written straight into this process's memory.

    client = outboard.connect()                  # None: a local agent
    tok = client.tokenizer("gpt2")               # placement="agent" | "host" | "auto"
    batch = tok.encode_batch(texts, max_len=2048)
    batch.ids, batch.offsets                     # np.int32 view of the registered buffer, np.uint64
    future = tok.submit(texts)                   # overlap: concurrent.futures.Future[Batch]
    batch = await tok.encode_batch_async(texts)  # asyncio: agent batches finish on the loop itself
    queue = tok.queue()                          # a serving loop's own: put() now, poll() each step

``host`` tokenizes in this process, ``agent`` on the agent, and ``auto`` routes each batch by
what it measures (see :class:`AutoPolicy`). Every placement gives the same ids and the same
per-text errors; a text that fails (invalid UTF-8, over ``max_len``, a disallowed special token,
too long, no room in the output buffer) fails alone.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import math
import os
import threading
import time
import weakref
from collections.abc import Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy as np

from . import _core
from .errors import Again, ConnectionReset, Error, InvalidArgument, NotConnected, ShutDown, TimedOut, TooBig, from_code
from .tokenizer import Tokenizer, Utf8Policy

if TYPE_CHECKING:
    from .client import Client

Text = Union[str, bytes]
Placement = Literal["host", "agent", "auto"]
PLACEMENTS: tuple[str, ...] = ("host", "agent", "auto")

#: Longest text the host placement takes: the agent's --max-text-bytes default, so both agree.
MAX_TEXT_BYTES = 16 << 20
#: Threads behind submit() on the host and auto placements: batches one tokenizer runs at once.
SUBMIT_THREADS = 4
#: Seconds the collector of agent batches stays after the last one finished.
COLLECT_WAIT_S = 0.2
#: Seconds between an event loop's checks of its agent batches' deadlines and of the agent's
#: liveness, while it has any (events wake it at once; these need the clock).
LOOP_WATCH_S = 0.05
#: Longest a BatchQueue.poll() that waits blocks on the agent alone while host batches are out too.
POLL_SLICE_S = 0.001
#: Most rounds of progress one BatchQueue.poll() makes: then the caller's loop goes on.
POLL_ROUNDS = 256
#: Errors after which the agent is presumed gone: auto stops routing to it.
_AGENT_DOWN = (ConnectionReset, NotConnected, ShutDown, TimedOut)


def open_local(name: str | Path) -> Tokenizer:
    """The in-process tokenizer for a name the agent also understands."""
    name = str(name)
    if name == "gpt2":
        return Tokenizer.gpt2()
    if name == "bert-base-uncased":
        return Tokenizer.bert_base_uncased()
    if name.endswith(".tiktoken"):
        return Tokenizer.from_tiktoken(name)
    if name.endswith(".json"):
        return Tokenizer.from_tokenizer_json(name)
    if name.endswith(".txt"):
        return Tokenizer.bert_wordpiece(name)
    raise InvalidArgument(f"tokenizer '{name}' is neither gpt2, bert-base-uncased nor a path to a .tiktoken, "
                          "tokenizer.json or vocab.txt file")


@dataclass
class Batch:
    """Ids of a batch: text i is ``ids[offsets[i]:offsets[i+1]]``; a failed text is empty and has
    its error in ``errors[i]``. From the agent, ``ids`` views the registered buffer it wrote."""

    ids: np.ndarray
    offsets: np.ndarray
    errors: list[Error | None]
    placement: str
    #: What the agent reported (queue_ns, tokenize_ns, cpu_ns, put_ns, queued_before); empty on host.
    agent: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.errors)

    def __getitem__(self, i: int) -> np.ndarray:
        """Ids of text i; raises its error if it failed."""
        err = self.errors[i]
        if err is not None:
            raise err
        return self.ids[int(self.offsets[i]):int(self.offsets[i + 1])]

    @property
    def ok(self) -> bool:
        return all(e is None for e in self.errors)


class AutoPolicy:
    """Routes each batch to the host or the agent from what it measured.

    Per placement it keeps an exponentially weighted service time per input byte, from the batches
    that went there (queueing left out: the agent reports its own, and host batches are timed on
    their pool thread). The agent's estimate grows with the batches this process has in flight to it
    (its queue, drained by ``agent_workers`` tokenize threads; the agent reports how many), but only
    by the part of each that the agent reports working (tokenizing, putting the ids): the transfer
    and this process's side of a batch overlap other batches. The host's estimate grows with its
    batches on the host (drained by at most SUBMIT_THREADS, the submit pool) and
    with this process's CPU use (a busy consumer tokenizes slowly and delays its own work). The
    agent is chosen while its estimate is within ``slack`` of the host's: offloading is preferred
    because it frees the consumer's CPU, unless the agent is clearly slower (saturated) — then
    batches spill to the host. A failed agent sends everything to the host for ``retry_after``
    seconds. A placement that has not answered for ``explore_after`` seconds, and has none of our
    batches, gets the next one: the first batches explore each placement, and an estimate never
    goes stale while the other placement takes everything (a burst before both have answered is
    shared by queue length).
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
        self.agent_workers = 1
        self._cpu = (time.process_time(), time.perf_counter())
        self._busy = 0.0  # share of one core this process used lately
        self._cores = max(1, len(os.sched_getaffinity(0)))  # refreshed with _busy, not per batch
        self.routed = {"host": 0, "agent": 0}

    def choose(self, nbytes: int) -> str:
        with self._lock:
            self._sample_cpu()
            now, cores = time.monotonic(), self._cores
            agent_queue = self._in_flight["agent"] / self.agent_workers
            host_queue = self._in_flight["host"] / min(cores, SUBMIT_THREADS)
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
            self._in_flight[choice] += 1
            self.routed[choice] += 1
            return choice

    def done(self, placement: str, nbytes: int, seconds: float, failed: BaseException | None = None, *,
             work_s: float | None = None) -> None:
        """A batch ended: ``seconds`` of service (queueing left out); for the agent, ``work_s`` of
        them it reports working on the batch (default: all)."""
        with self._lock:
            self._in_flight[placement] -= 1
            if failed is not None:
                if placement == "agent" and isinstance(failed, _AGENT_DOWN):
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

    def _sample_cpu(self) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        if wall - self._cpu[1] >= 0.05:
            busy = (cpu - self._cpu[0]) / (wall - self._cpu[1])
            self._busy += 0.5 * (busy - self._busy)
            self._cores = max(1, len(os.sched_getaffinity(0)))
            self._cpu = (cpu, wall)


class OffloadTokenizer:
    """A tokenizer placed on the host, the agent, or chosen per batch. Safe to use from several
    threads; batches from different threads are in flight at once."""

    def __init__(self, client: Client | None, name: str | Path, *, placement: Placement = "agent",
                 policy: AutoPolicy | None = None, timeout: float = 10.0, output: np.ndarray | None = None) -> None:
        if placement not in PLACEMENTS:
            raise InvalidArgument(f"placement '{placement}' is not one of {', '.join(PLACEMENTS)}")
        if placement != "host" and client is None:
            raise InvalidArgument(f"placement '{placement}' needs a client connected to an agent")
        # A Path is a file of this machine, sent to the agent whatever its form (the agent takes
        # a name with a "/" for one).
        self.name = str(name.absolute()) if isinstance(name, Path) else name
        self.placement = placement
        self.timeout = timeout
        self.policy = (policy or AutoPolicy()) if placement == "auto" else policy
        self._client = client
        self._local: Tokenizer | None = open_local(name) if placement != "agent" else None
        self._remote: _core.RemoteTokenizer | None = None
        if placement != "host":
            assert client is not None
            self._remote = _core.RemoteTokenizer.open(client.connection, self.name, timeout,
                                                      output=_output_memory(output))
            if self.policy is not None:
                self.policy.agent_workers = max(1, int(client.stats().get("tokenize_threads", 1)))
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._completions = _core.Completions(client.connection) if self._remote is not None else None
        self._futures: dict[int, Future[Batch]] = {}
        self._next_token = 0
        self._collector: threading.Thread | None = None
        self._closing = False

    @property
    def vocab_size(self) -> int:
        return self._remote.vocab_size if self._remote is not None else self._local.vocab_size  # type: ignore[union-attr]

    def encode_batch(self, texts: Sequence[Text], *, max_len: int | None = None,
                     allowed_special: Literal["all"] | Collection[str] = (), utf8: Utf8Policy = "strict",
                     add_special_tokens: bool = False, capacity: int | None = None) -> Batch:
        """Ids of every text. ``max_len``: more ids fail that text (never truncated); ``capacity``:
        id slots for the whole batch (default: as many as the texts can produce)."""
        texts = list(texts)
        args = self._options(max_len, allowed_special, utf8, add_special_tokens, capacity)
        if self.placement != "auto":
            return self._encode(self.placement, texts, **args)
        assert self.policy is not None
        nbytes = sum(len(t) for t in texts)
        if self.policy.choose(nbytes) == "agent":
            start = time.perf_counter()
            try:
                batch = self._encode("agent", texts, **args)
            except Exception as e:
                if not self._redo_on_host(e, nbytes):
                    raise
                return self._host_for_policy(texts, args, nbytes)
            _agent_done(self.policy, nbytes, batch, start)
            return batch
        return self._host_for_policy(texts, args, nbytes)

    async def encode_batch_async(self, texts: Sequence[Text], *, max_len: int | None = None,
                                 allowed_special: Literal["all"] | Collection[str] = (), utf8: Utf8Policy = "strict",
                                 add_special_tokens: bool = False, capacity: int | None = None) -> Batch:
        """encode_batch() for asyncio. A batch for the agent is sent at once and finished on the loop
        itself, which watches the connection's event fd: no thread hand-off per batch. The loop never
        waits for the agent's answer, nor for credit when the agent's window is full; the one round
        trip it may wait for is the registration of more id memory, when a peak needs it (as in
        submit()). Host batches run on the submit pool; ``auto`` routes as encode_batch() does."""
        texts = list(texts)
        args = self._options(max_len, allowed_special, utf8, add_special_tokens, capacity)
        loop = asyncio.get_running_loop()
        if self.placement == "host":
            return await loop.run_in_executor(self._pool(), functools.partial(self._encode, "host", texts, **args))
        if self.placement == "agent":
            return await self._agent_async(loop, texts, args)
        assert self.policy is not None
        nbytes = sum(len(t) for t in texts)
        if self.policy.choose(nbytes) == "agent":
            start = time.perf_counter()
            try:
                batch = await self._agent_async(loop, texts, args)
            except BaseException as e:  # cancelled too: the policy counts the batch as ended
                if not self._redo_on_host(e, nbytes):
                    raise
            else:
                _agent_done(self.policy, nbytes, batch, start)
                return batch
        return await loop.run_in_executor(self._pool(), self._host_for_policy, texts, args, nbytes)

    async def _agent_async(self, loop: asyncio.AbstractEventLoop, texts: list[Text], args: dict[str, Any]) -> Batch:
        assert self._remote is not None and self._client is not None
        return await _LoopCompletions.of(loop, self._client.connection).encode(self, texts, args)

    def submit(self, texts: Sequence[Text], *, max_len: int | None = None,
               allowed_special: Literal["all"] | Collection[str] = (), utf8: Utf8Policy = "strict",
               add_special_tokens: bool = False, capacity: int | None = None) -> Future[Batch]:
        """encode_batch() without waiting, so a server overlaps its batches. A batch for the agent is
        sent at once and one collector thread finishes every future (many per wake-up under load);
        host batches run on a pool of SUBMIT_THREADS threads. ``auto`` routes each batch when it is
        submitted, and redoes it on the host if the agent fails."""
        texts = list(texts)
        args = self._options(max_len, allowed_special, utf8, add_special_tokens, capacity)
        if self.placement != "auto":
            return self._submit_to(self.placement, texts, args)
        assert self.policy is not None
        policy, nbytes = self.policy, sum(len(t) for t in texts)
        if policy.choose(nbytes) == "host":
            return self._pool().submit(self._host_for_policy, texts, args, nbytes)
        start = time.perf_counter()
        outer: Future[Batch] = Future()
        outer.set_running_or_notify_cancel()

        def agent_done(f: Future[Batch]) -> None:
            failed = f.exception()
            if failed is None:
                _agent_done(policy, nbytes, f.result(), start)
                outer.set_result(f.result())
                return
            if not self._redo_on_host(failed, nbytes):
                outer.set_exception(failed)
                return
            redo = self._pool().submit(self._host_for_policy, texts, args, nbytes)

            def redone(r: Future[Batch]) -> None:
                if r.exception() is not None:
                    outer.set_exception(r.exception())
                else:
                    outer.set_result(r.result())
            redo.add_done_callback(redone)
        self._submit_to("agent", texts, args).add_done_callback(agent_done)
        return outer

    def queue(self) -> BatchQueue:
        """A queue of batches that the caller's own loop takes finished (see :class:`BatchQueue`)."""
        return BatchQueue(self)

    def _redo_on_host(self, failed: BaseException, nbytes: int) -> bool:
        """Counts an agent batch that failed; True when it is to be redone here (the agent is
        presumed down), routed to the host."""
        assert self.policy is not None
        self.policy.done("agent", nbytes, 0.0, failed)
        if not (isinstance(failed, _AGENT_DOWN) and self._local is not None):
            return False
        self.policy.choose(nbytes)
        return True

    def _host_for_policy(self, texts: list[Text], args: dict[str, Any], nbytes: int) -> Batch:
        # Timed where it runs: the policy wants service time, and adds queueing from its own counts.
        assert self.policy is not None
        start = time.perf_counter()
        try:
            batch = self._encode("host", texts, **args)
        except BaseException as e:
            self.policy.done("host", nbytes, 0.0, e)
            raise
        self.policy.done("host", nbytes, time.perf_counter() - start)
        return batch

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(SUBMIT_THREADS, thread_name_prefix="outboard-tokenize")
            return self._executor

    def _submit_to(self, where: str, texts: list[Text], args: dict[str, Any]) -> Future[Batch]:
        if where == "host":
            return self._pool().submit(self._encode, "host", texts, **args)
        assert self._remote is not None
        future: Future[Batch] = Future()
        future.set_running_or_notify_cancel()
        with self._lock:
            token = self._next_token
            self._next_token += 1
            self._futures[token] = future
            if self._collector is None:
                # Not a daemon: one killed inside the native wait at interpreter exit aborts the process.
                # It ends by itself, COLLECT_WAIT_S after its last batch (each bounded by `timeout`).
                self._collector = threading.Thread(target=self._collect, name="outboard-collect")
                self._collector.start()
        try:
            self._send(self._completions, token, texts, args, self.timeout, wait_credit=True)
        except Error as e:
            with self._lock:
                self._futures.pop(token, None)
            future.set_exception(e)
        return future

    def _send(self, completions: _core.Completions, token: int, texts: list[Text], args: dict[str, Any],
              timeout: float, *, wait_credit: bool) -> None:
        assert self._remote is not None
        self._remote.submit(completions, token, texts, allow_special=args["allow"], utf8=args["utf8"],
                            add_special_tokens=args["add_special_tokens"], max_len=args["max_len"],
                            capacity=args["capacity"], timeout=timeout, wait_credit=wait_credit)

    def close(self) -> None:
        """Waits for submitted batches (each bounded by ``timeout``), then stops the submit threads."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        with self._lock:
            self._closing = True
            collector = self._collector
        if collector is not None:
            collector.join()
        self._closing = False

    def _collect(self) -> None:
        # Runs while agent batches are in flight and COLLECT_WAIT_S after; the next submit() starts
        # another (starting a thread per batch would cost more than the batch).
        idle_since = None
        while True:
            with self._lock:
                if self._futures:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif self._closing or time.monotonic() - idle_since >= COLLECT_WAIT_S:
                    self._collector = None
                    return
            for token, ok, result in self._completions.collect(COLLECT_WAIT_S / 4):
                with self._lock:
                    future = self._futures.pop(token)
                if ok:
                    future.set_result(_agent_batch(result))
                else:
                    future.set_exception(from_code(*result))

    def _options(self, max_len: int | None, allowed_special: Literal["all"] | Collection[str], utf8: str,
                 add_special_tokens: bool, capacity: int | None) -> dict[str, Any]:
        for name, value, limit in (("max_len", max_len, 2**32 - 1), ("capacity", capacity, 2**64 - 1)):
            if value is not None and not 0 <= value <= limit:
                raise InvalidArgument(f"{name} {value} is not in 0..{limit}")
        allow = allowed_special == "all" or bool(allowed_special)
        if allowed_special not in ("all", ()) and self._local is not None:
            self._local._allow(allowed_special)  # unknown names are an error, as in tiktoken
        return dict(max_len=max_len or 0, allow=allow, utf8=utf8, add_special_tokens=add_special_tokens,
                    capacity=capacity or 0)

    def _encode(self, where: str, texts: list[Text], *, max_len: int, allow: bool, utf8: str,
                add_special_tokens: bool, capacity: int) -> Batch:
        if where == "agent":
            assert self._remote is not None
            return _agent_batch(self._remote.encode_batch(
                texts, allow_special=allow, utf8=utf8, add_special_tokens=add_special_tokens, max_len=max_len,
                capacity=capacity, timeout=self.timeout))
        assert self._local is not None
        return _host_batch(self._local, texts, max_len=max_len, allow=allow, utf8=utf8,
                           add_special_tokens=add_special_tokens, capacity=capacity)


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
        remote = tok._remote is not None
        self._connection = tok._client.connection if remote and tok._client is not None else None
        self._completions = _core.Completions(self._connection) if self._connection is not None else None
        #: Agent batches out: ticket -> (texts, options, bytes), for auto's policy and redo.
        self._agent: dict[int, tuple[list[Text], dict[str, Any], int]] = {}
        self._host_out = 0
        self._host_done: list[tuple[int, Batch | BaseException]] = []
        self._host_ready = threading.Condition()
        self._taken: list[tuple[int, Batch | BaseException]] = []  # agent batches put() took, for poll()
        self._next_ticket = 0

    @property
    def pending(self) -> int:
        """Batches put and not yet returned by poll()."""
        with self._host_ready:
            return len(self._agent) + len(self._taken) + self._host_out + len(self._host_done)

    def put(self, texts: Sequence[Text], *, max_len: int | None = None,
            allowed_special: Literal["all"] | Collection[str] = (), utf8: Utf8Policy = "strict",
            add_special_tokens: bool = False, capacity: int | None = None) -> int:
        """Starts a batch (options as in encode_batch()); poll() returns it with this ticket. Waits
        only when the agent's window is full, progressing the connection meanwhile."""
        tok = self._tok
        texts = list(texts)
        args = tok._options(max_len, allowed_special, utf8, add_special_tokens, capacity)
        ticket, self._next_ticket = self._next_ticket, self._next_ticket + 1
        nbytes = sum(len(t) for t in texts)
        where = tok.placement
        if tok.policy is not None and where == "auto":
            # The policy counts agent batches out until they are taken: take those already answered.
            self._taken += self._take_agent(0.0)
            where = tok.policy.choose(nbytes)
        if where == "host":
            self._on_host(ticket, texts, args, nbytes)
            return ticket
        assert self._completions is not None
        self._agent[ticket] = (texts, args, nbytes)
        try:
            tok._send(self._completions, ticket, texts, args, tok.timeout, wait_credit=True)
        except Error as e:
            self._agent_failed(ticket, e)
        return ticket

    def poll(self, timeout: float = 0.0) -> list[tuple[int, Batch | BaseException]]:
        """The batches finished since the last poll, each once: (ticket, Batch), or (ticket, the
        error that failed the whole batch). With ``timeout``, waits up to that many seconds for one."""
        deadline = time.monotonic() + timeout
        wait = 0.0
        while True:
            finished, self._taken = self._taken + self._take_agent(wait), []
            with self._host_ready:
                finished += self._host_done
                self._host_done = []
            left = deadline - time.monotonic()
            if finished or left <= 0 or not self.pending:
                return finished
            if self._agent:  # the agent's answers wake the connection; host ones are checked between slices
                wait = min(left, POLL_SLICE_S) if self._host_out else left
            else:
                with self._host_ready:
                    self._host_ready.wait_for(lambda: bool(self._host_done), left)
                wait = 0.0

    def _take_agent(self, wait: float) -> list[tuple[int, Batch | BaseException]]:
        if not self._agent:
            return []
        assert self._completions is not None and self._connection is not None
        if wait > 0:
            answers = self._completions.collect(wait)
        else:
            # One round takes only some of what came in: a loop polling now and then falls behind.
            self._connection.progress_until_idle(POLL_ROUNDS)
            answers = self._completions.take()
        finished: list[tuple[int, Batch | BaseException]] = []
        policy = self._tok.policy if self._tok.placement == "auto" else None
        for ticket, ok, result in answers:
            if not ok:
                self._agent_failed(ticket, from_code(*result))
                continue
            _, _, nbytes = self._agent.pop(ticket)
            batch = _agent_batch(result)
            if policy is not None:
                _agent_done(policy, nbytes, batch, None)
            finished.append((ticket, batch))
        return finished

    def _agent_failed(self, ticket: int, failed: Error) -> None:
        texts, args, nbytes = self._agent.pop(ticket)
        if self._tok.placement == "auto" and self._tok._redo_on_host(failed, nbytes):
            self._on_host(ticket, texts, args, nbytes)
            return
        with self._host_ready:  # returned by the next poll, as host batches are
            self._host_done.append((ticket, failed))
            self._host_ready.notify()

    def _on_host(self, ticket: int, texts: list[Text], args: dict[str, Any], nbytes: int) -> None:
        tok = self._tok
        with self._host_ready:
            self._host_out += 1
        future = (tok._pool().submit(tok._host_for_policy, texts, args, nbytes) if tok.placement == "auto"
                  else tok._pool().submit(tok._encode, "host", texts, **args))

        def done(f: Future[Batch]) -> None:
            failed = f.exception()
            with self._host_ready:
                self._host_out -= 1
                self._host_done.append((ticket, f.result() if failed is None else failed))
                self._host_ready.notify()
        future.add_done_callback(done)


class _LoopCompletions:
    """The agent batches of one event loop, finished on the loop: it watches the channel's event fd
    while any are out (and LOOP_WATCH_S after: registering it per batch would cost more than the
    batch), and progresses the connection itself when that is readable. One per loop and event fd,
    because the fd is the process's channel hub, shared by every connection."""

    _of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, _LoopCompletions]] = (
        weakref.WeakKeyDictionary())

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop, connection: _core.Connection) -> _LoopCompletions:
        per_fd = cls._of.setdefault(loop, {})
        fd = connection.event_fd
        if fd not in per_fd:
            per_fd[fd] = cls(loop, connection)
        return per_fd[fd]

    def __init__(self, loop: asyncio.AbstractEventLoop, connection: _core.Connection) -> None:
        self.loop = loop
        self.connection = connection
        self.fd = connection.event_fd
        self.completions = _core.Completions(connection)
        self.futures: dict[int, asyncio.Future[Batch]] = {}
        #: Batches waiting for credit, in line: (deadline, waiter). One at a time retries (waking all
        #: at each answer cost O(waiting) failed sends per answer: 2.8x the host's CPU in overload).
        self.credit: collections.deque[tuple[float, asyncio.Future[bool]]] = collections.deque()
        self.next_token = 0
        self.watch: asyncio.TimerHandle | None = None
        self.waits_for_credit = 0  # times a batch found the agent's window full

    async def encode(self, tok: OffloadTokenizer, texts: list[Text], args: dict[str, Any]) -> Batch:
        deadline = time.monotonic() + tok.timeout
        token, self.next_token = self.next_token, self.next_token + 1
        waited = False
        while True:
            try:
                tok._send(self.completions, token, texts, args, max(deadline - time.monotonic(), 0.0),
                          wait_credit=False)
                break
            except Again:
                # The agent's window is full: credit comes back with its next answers. A batch
                # that tried again in vain keeps its place at the head of the line.
                self.waits_for_credit += 1
                waiter: asyncio.Future[bool] = self.loop.create_future()
                (self.credit.appendleft if waited else self.credit.append)((deadline, waiter))
                self._watch()
                if not await waiter:
                    raise TimedOut(f"batch of {len(texts)} texts: no credit from the agent within the timeout of "
                                   f"{tok.timeout:g} s (its window stayed full of batches)") from None
                waited = True
        if waited:
            self._next_for_credit()  # there may be credit for the next in line too
        future: asyncio.Future[Batch] = self.loop.create_future()
        self.futures[token] = future
        self._watch()
        return await future

    def _watch(self) -> None:
        if self.watch is None:
            self.loop.add_reader(self.fd, self._ready)
            self.watch = self.loop.call_later(LOOP_WATCH_S, self._tick)

    def _tick(self) -> None:
        if not self.futures and not self.credit:  # idle for a while: let go of the fd and the connection
            self._unwatch()
            del self._of[self.loop][self.fd]
            return
        # Request deadlines and the agent's liveness are checked every 16th round of progress.
        for _ in range(16):
            self.connection.progress()
        now, waiting = time.monotonic(), self.credit
        self.credit = collections.deque(w for w in waiting if w[0] > now and not w[1].done())
        for deadline, waiter in waiting:
            if deadline <= now and not waiter.done():
                waiter.set_result(False)
        self.watch = self.loop.call_later(LOOP_WATCH_S, self._tick)
        self._ready()

    def _ready(self) -> None:
        for _ in range(64):  # then let the loop's other work in, and come back
            try:
                armed = self.connection.arm()  # False: it progressed and found work
            except Error as e:  # the fd cannot be armed: nothing of ours would ever finish
                return self._fail_all(e)
            for token, ok, result in self.completions.take():
                future = self.futures.pop(token, None)
                if future is None or future.done():  # its task was cancelled
                    continue
                if ok:
                    future.set_result(_agent_batch(result))
                else:
                    future.set_exception(from_code(*result))
            if armed:
                break
        else:
            self.loop.call_soon(self._ready)
        self._next_for_credit()  # what came in may have returned credit

    def _next_for_credit(self) -> None:
        """Wakes the first batch in line for credit (cancelled ones leave the line)."""
        while self.credit:
            deadline, waiter = self.credit.popleft()
            if not waiter.done():
                waiter.set_result(time.monotonic() < deadline)
                return

    def _fail_all(self, error: Error) -> None:
        for future in [*self.futures.values(), *(waiter for _, waiter in self.credit)]:
            if not future.done():
                future.set_exception(error)
        self.futures.clear()
        self.credit.clear()

    def _unwatch(self) -> None:
        if self.watch is not None:
            self.loop.remove_reader(self.fd)
            self.watch.cancel()
            self.watch = None


def _output_memory(output: np.ndarray | None) -> np.ndarray | None:
    if output is None:
        return None
    if not isinstance(output, np.ndarray):
        raise InvalidArgument(f"output must be a numpy array (a torch tensor's .numpy()), "
                              f"not {type(output).__name__}")
    problems = [p for p, bad in ((f"dtype {output.dtype}, not int32", output.dtype != np.int32),
                                 (f"{output.ndim} dimensions, not 1", output.ndim != 1),
                                 ("not C-contiguous", not output.flags.c_contiguous),
                                 ("read-only", not output.flags.writeable),
                                 ("empty", output.size == 0)) if bad]
    if problems:
        raise InvalidArgument(f"output array for the ids: {', '.join(problems)}")
    return output


def _agent_done(policy: AutoPolicy, nbytes: int, batch: Batch, sent: float | None) -> None:
    """Tells the policy an agent batch's service: its latency less the agent's own queue (the policy
    counts that), and the part the agent reports working (tokenizing, putting the ids). A batch a
    poll took (``sent`` None) ended some time before that poll, unknown: its service is the work alone."""
    timing = batch.agent
    work_s = (timing["tokenize_ns"] + timing["put_ns"]) / 1e9 if timing else None
    seconds = time.perf_counter() - sent - timing.get("queue_ns", 0) / 1e9 if sent is not None else work_s or 0.0
    policy.done("agent", nbytes, seconds, work_s=work_s)


def _agent_batch(native: tuple[Any, ...]) -> Batch:
    ids, offsets, errors, timing = native
    return Batch(ids, offsets, [None if e is None else from_code(*e) for e in errors], "agent", timing)


def _host_batch(tok: Tokenizer, texts: list[Text], *, max_len: int, allow: bool, utf8: str,
                add_special_tokens: bool, capacity: int) -> Batch:
    """The agent's per-text rules, applied in this process."""
    core = tok._core
    if all(len(t) <= MAX_TEXT_BYTES for t in texts):
        try:
            ids, offsets = core.encode_batch(texts, allow_special=allow, utf8=utf8,
                                             add_special_tokens=add_special_tokens)
        except Error:
            pass
        else:
            longest = int(np.diff(offsets).max(initial=0))
            if (max_len == 0 or longest <= max_len) and (capacity == 0 or len(ids) <= capacity):
                return Batch(ids, offsets, [None] * len(texts), "host")
    # Some text fails: encode one by one, exactly as the agent decides.
    parts: list[np.ndarray] = []
    errors: list[Error | None] = []
    offs = [0]
    used = 0
    for i, text in enumerate(texts):
        err: Error | None = None
        if len(text) > MAX_TEXT_BYTES:
            err = TooBig(f"text {i} of {len(text)} B exceeds max_text_bytes {MAX_TEXT_BYTES}")
        else:
            try:
                one = core.encode(text, allow_special=allow, utf8=utf8, add_special_tokens=add_special_tokens)
            except Error as e:
                err = type(e)(f"text {i}: {e.message}")
            else:
                if max_len and len(one) > max_len:
                    err = TooBig(f"text {i} has {len(one)} ids, over max_len {max_len}")
                elif capacity and used + len(one) > capacity:
                    err = TooBig(f"output buffer too small: text {i} needs {len(one)} ids at id {used} but the "
                                 f"buffer holds {capacity} ids")
                else:
                    parts.append(one)
                    used += len(one)
        errors.append(err)
        offs.append(used)
    ids = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    return Batch(ids, np.asarray(offs, np.uint64), errors, "host")
