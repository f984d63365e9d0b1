"""OffloadTokenizer: a tokenizer on the host, the agent, or chosen per batch, and the one route
every batch takes whichever way its caller waits."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np

from .. import _core
from ..errors import InvalidArgument
from ..tokenizer import Tokenizer, Utf8Policy
from . import aio
from .batch import Batch, Finish, HostRunner, Options, Outcome, Text, host_batch, settle
from .inflight import InFlight
from .policy import AutoPolicy
from .queue import BatchQueue

Placement = Literal["host", "agent", "auto", "gpu"]
PLACEMENTS: tuple[str, ...] = ("host", "agent", "auto", "gpu")

#: Threads behind submit() on the host and auto placements: batches one tokenizer runs at once.
SUBMIT_THREADS = 4
#: Seconds the collector of agent batches stays after the last one finished.
COLLECT_WAIT_S = 0.2

#: Sends a batch to the agent; its answer (or the error that failed it) goes to the callback.
AgentSender = Callable[[list[Text], Options, Finish], None]


_NAMED = {"gpt2": Tokenizer.gpt2, "cl100k_base": Tokenizer.cl100k_base, "o200k_base": Tokenizer.o200k_base,
          "tekken": Tokenizer.tekken, "mistral-v1": Tokenizer.mistral_v1, "mistral-v3": Tokenizer.mistral_v3,
          "bert-base-uncased": Tokenizer.bert_base_uncased}


def open_local(name: str | Path) -> Tokenizer:
    """The in-process tokenizer for a name the agent also understands."""
    name = str(name)
    if name in _NAMED:
        return _NAMED[name]()
    if name.endswith((".tiktoken", ".json", ".txt", ".model")) or ".model.v" in Path(name).name:
        return Tokenizer.from_file(name)
    raise InvalidArgument(f"tokenizer '{name}' is neither one of {', '.join(_NAMED)} "
                          "nor a path to a .tiktoken, tokenizer .json, vocab.txt or SentencePiece .model file")


class OffloadTokenizer:
    """A tokenizer placed on the host, the agent, or chosen per batch. Safe to use from several
    threads; batches from different threads are in flight at once.

    ``connection``: the agent's (None for ``placement="host"``); what the agent announced about
    itself in its welcome (``connection.agent_info``: its tokenize threads) sizes auto's estimate
    of its queue. ``Client.tokenizer()`` is the usual way to make one."""

    def __init__(self, connection: _core.Connection | None, name: str | Path, *, placement: Placement = "agent",
                 policy: AutoPolicy | None = None, timeout: float = 10.0, output: object = None) -> None:
        if placement not in PLACEMENTS:
            raise InvalidArgument(f"placement '{placement}' is not one of {', '.join(PLACEMENTS)}")
        if placement in ("agent", "auto") and connection is None:
            raise InvalidArgument(f"placement '{placement}' needs a connection to an agent")
        if placement == "gpu" and output is None:
            raise InvalidArgument("placement 'gpu' writes the ids into GPU memory of yours: pass output=<a 1-D int32 "
                                  "CUDA tensor>")
        # A Path is a file of this machine, sent to the agent whatever its form (the agent takes
        # a name with a "/" for one).
        self.name = str(name.absolute()) if isinstance(name, Path) else name
        self.placement = placement
        self.timeout = timeout
        self.policy = (policy or AutoPolicy()) if placement == "auto" else policy
        self._connection = connection
        self._local: Tokenizer | None = open_local(name) if placement != "agent" else None
        self._remote: _core.RemoteTokenizer | None = None
        self._gpu: GpuRunner | None = None
        if placement == "gpu":
            assert self._local is not None
            self._gpu = GpuRunner(self._local, output)
        if connection is not None and placement in ("agent", "auto"):
            self._remote = _core.RemoteTokenizer.open(connection, self.name, timeout, output=_output_memory(output))
            if self.policy is not None:
                self.policy.agent_workers = max(1, int(connection.agent_info.get("tokenize_threads", 1)))
        if self.policy is not None:
            self.policy.host_workers = SUBMIT_THREADS
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        #: submit()'s agent batches, finished by the collector thread (or a caller waiting on one).
        self._submitted = InFlight(connection) if self._remote is not None and connection is not None else None
        self._collector: threading.Thread | None = None
        self._closing = False
        self._waiting = threading.local()  # per thread, the InFlight of its blocking calls

    @property
    def vocab_size(self) -> int:
        return self._remote.vocab_size if self._remote is not None else self._local.vocab_size  # type: ignore[union-attr]

    @property
    def local(self) -> Tokenizer | None:
        """The in-process tokenizer of the host and auto placements (None for "agent")."""
        return self._local

    def encode_batch(self, texts: Sequence[Text], *, max_len: int | None = None,
                     allowed_special: Literal["all"] | Collection[str] = (), utf8: Utf8Policy = "strict",
                     add_special_tokens: bool = False, capacity: int | None = None) -> Batch:
        """Ids of every text. ``max_len``: more ids fail that text (never truncated); ``capacity``:
        id slots for the whole batch (default: as many as the texts can produce). Raises the error
        that failed the whole batch."""
        options = self._options(max_len, allowed_special, utf8, add_special_tokens, capacity)
        ended: list[Outcome] = []
        # Both runners finish before they return: the batch has ended here.
        self._route(list(texts), options, ended.append, host=_run_here, agent=self._agent_waiting)
        [outcome] = ended
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def submit(self, texts: Sequence[Text], *, max_len: int | None = None,
               allowed_special: Literal["all"] | Collection[str] = (), utf8: Utf8Policy = "strict",
               add_special_tokens: bool = False, capacity: int | None = None) -> Future[Batch]:
        """encode_batch() without waiting, so a server overlaps its batches. A batch for the agent is
        sent at once and one collector thread finishes every future (many per wake-up under load);
        host batches run on a pool of SUBMIT_THREADS threads. ``auto`` routes each batch when it is
        submitted, and redoes it on the host if the agent fails."""
        options = self._options(max_len, allowed_special, utf8, add_special_tokens, capacity)
        future: Future[Batch] = Future()
        future.set_running_or_notify_cancel()
        self._route(list(texts), options, functools.partial(settle, future), host=self._on_pool,
                    agent=self._agent_collected)
        return future

    async def encode_batch_async(self, texts: Sequence[Text], *, max_len: int | None = None,
                                 allowed_special: Literal["all"] | Collection[str] = (), utf8: Utf8Policy = "strict",
                                 add_special_tokens: bool = False, capacity: int | None = None) -> Batch:
        """encode_batch() for asyncio. A batch for the agent is sent at once and finished on the loop
        itself, which watches the connection's event fd: no thread hand-off per batch. The loop never
        waits for the agent's answer, nor for credit when the agent's window is full; the one round
        trip it may wait for is the registration of more id memory, when a peak needs it (as in
        submit()). Host batches run on the submit pool; ``auto`` routes as encode_batch() does. A
        cancelled call's agent batch ends at once (auto's policy counts it so) and its answer is dropped."""
        options = self._options(max_len, allowed_special, utf8, add_special_tokens, capacity)
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[Batch] = loop.create_future()
        route = aio.LoopRoute(loop, self._connection, self._remote, self.timeout, self._on_pool)
        self._route(list(texts), options, functools.partial(settle, ended), host=route.host, agent=route.agent)
        try:
            return await ended
        except asyncio.CancelledError:
            route.cancel()
            raise

    def queue(self) -> BatchQueue:
        """A queue of batches that the caller's own loop takes finished (see :class:`BatchQueue`)."""
        return BatchQueue(self)

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

    def _route(self, texts: list[Text], options: Options, finish: Finish, *, host: HostRunner,
               agent: AgentSender, answers_on_time: bool = True) -> None:
        """The one route of a batch, whichever way its caller waits (``host`` and ``agent`` say how):
        the placement (``auto``: the policy chooses), the agent's answer or failure, its redo on the
        host when the agent is presumed down, and what the policy is told of each. ``finish`` gets
        the outcome once. ``answers_on_time``: False when answers are taken some time after they
        came (a poll's), so that their latency says nothing of the agent's service."""
        policy = self.policy if self.placement == "auto" else None
        if policy is None:
            if self.placement in ("host", "gpu"):
                host(functools.partial(self._here, texts, options), finish)
            else:
                agent(texts, options, finish)
            return
        nbytes = sum(len(t) for t in texts)
        here = functools.partial(self._here_for_policy, policy, texts, options, nbytes)
        if policy.choose(nbytes) == "host":
            host(here, finish)
            return
        sent = time.perf_counter()

        def answered(outcome: Outcome) -> None:
            if isinstance(outcome, Batch):
                policy.agent_answered(nbytes, outcome, sent if answers_on_time else None)
            elif policy.agent_failed(nbytes, outcome):
                host(here, finish)
                return
            finish(outcome)
        agent(texts, options, answered)

    def _here(self, texts: list[Text], options: Options) -> Batch:
        if self._gpu is not None:
            return self._gpu(texts, options)
        assert self._local is not None
        return host_batch(self._local._core, texts, options)

    def _here_for_policy(self, policy: AutoPolicy, texts: list[Text], options: Options, nbytes: int) -> Batch:
        # Timed where it runs: the policy wants service time, and adds queueing from its own counts.
        start = time.perf_counter()
        try:
            batch = self._here(texts, options)
        except BaseException as e:
            policy.done("host", nbytes, 0.0, e)
            raise
        policy.done("host", nbytes, time.perf_counter() - start)
        return batch

    def _agent_waiting(self, texts: list[Text], options: Options, answered: Finish) -> None:
        """An agent batch this thread waits for, driving the connection: it takes the answers of an
        InFlight of its own (another thread's progress that finishes it wakes this one), kept for
        its next batch."""
        assert self._connection is not None and self._remote is not None
        inflight = getattr(self._waiting, "inflight", None)
        if inflight is None:
            inflight = self._waiting.inflight = InFlight(self._connection)
        inflight.send(inflight.expect(answered), self._remote, texts, **options.keywords(), timeout=self.timeout)
        while len(inflight):  # the batch's deadline bounds this
            inflight.collect(self.timeout)

    def _agent_collected(self, texts: list[Text], options: Options, answered: Finish) -> None:
        """An agent batch the collector thread finishes (it is expected before the collector is looked
        for, so a collector about to leave sees it)."""
        inflight = self._submitted
        assert inflight is not None and self._remote is not None
        token = inflight.expect(answered)
        with self._lock:
            if self._collector is None:
                # Not a daemon: one killed inside the native wait at interpreter exit aborts the process.
                # It ends by itself, COLLECT_WAIT_S after its last batch (each bounded by `timeout`).
                self._collector = threading.Thread(target=self._collect, name="outboard-collect")
                self._collector.start()
        inflight.send(token, self._remote, texts, **options.keywords(), timeout=self.timeout)

    def _collect(self) -> None:
        # Runs while agent batches are in flight and COLLECT_WAIT_S after; the next submit() starts
        # another (starting a thread per batch would cost more than the batch).
        inflight = self._submitted
        assert inflight is not None
        idle_since = None
        while True:
            with self._lock:
                if len(inflight):
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif self._closing or time.monotonic() - idle_since >= COLLECT_WAIT_S:
                    self._collector = None
                    return
            inflight.collect(COLLECT_WAIT_S / 4)

    def _on_pool(self, work: Callable[[], Batch], finish: Finish) -> None:
        """Runs a host batch on the submit pool; its outcome goes to ``finish`` on the pool's thread."""
        self._pool().submit(work).add_done_callback(lambda f: finish(_outcome(f)))

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(SUBMIT_THREADS, thread_name_prefix="outboard-tokenize")
            return self._executor

    def _options(self, max_len: int | None, allowed_special: Literal["all"] | Collection[str], utf8: str,
                 add_special_tokens: bool, capacity: int | None) -> Options:
        for name, value, limit in (("max_len", max_len, 2**32 - 1), ("capacity", capacity, 2**64 - 1)):
            if value is not None and not 0 <= value <= limit:
                raise InvalidArgument(f"{name} {value} is not in 0..{limit}")
        if allowed_special not in ("all", ()) and self._local is not None:
            self._local._allow(allowed_special)  # unknown names are an error, as in tiktoken
        return Options(max_len=max_len or 0, allow_special=allowed_special == "all" or bool(allowed_special),
                       utf8=utf8, add_special_tokens=add_special_tokens, capacity=capacity or 0)


def _run_here(work: Callable[[], Batch], finish: Finish) -> None:
    try:
        batch = work()
    except Exception as e:
        finish(e)
    else:
        finish(batch)


def _outcome(future: Future[Batch]) -> Outcome:
    failed = future.exception()
    return future.result() if failed is None else failed


class GpuRunner:
    """The gpu placement: GPT-2's BPE or BERT's WordPiece on the CUDA device, the ids written into
    ``output`` (a 1-D int32 CUDA tensor of the caller's). Batches run one at a time, and each one's
    ids are ``output[:n]`` until the next one: use them (an embedding kernel) before tokenizing more."""

    def __init__(self, local: Tokenizer, output: object) -> None:
        self._core = _core.GpuTokenizer.create(local._core)
        self._output = output
        self._lock = threading.Lock()

    def __call__(self, texts: list[Text], options: Options) -> Batch:
        unsupported = [what for what, asked in (("special ids", options.allow_special),
                                                ("add_special_tokens", options.add_special_tokens),
                                                (f"utf8='{options.utf8}'", options.utf8 != "strict"),
                                                ("max_len", options.max_len != 0)) if asked]
        if unsupported:
            raise InvalidArgument(f"the gpu placement has no {', '.join(unsupported)}: it encodes strict UTF-8 "
                                  "without special tokens")
        output = self._output if not options.capacity else self._output[:options.capacity]  # type: ignore[index]
        with self._lock:
            offsets, stages = self._core.encode_batch(texts, output)
        batch = Batch(output[:int(offsets[-1])], offsets, None, "gpu")  # type: ignore[index]
        batch.stages = stages
        return batch


#: DLPack's device type of CUDA memory (a CUDA tensor's __dlpack_device__()[0]).
DLPACK_CUDA = 2


def _output_memory(output: object) -> object:
    """``output`` checked: a numpy array, or a CUDA tensor (torch's) that the agent writes on the GPU."""
    if output is None:
        return None
    if not isinstance(output, np.ndarray):
        device = getattr(output, "__dlpack_device__", None)
        if device is None or device()[0] != DLPACK_CUDA:
            raise InvalidArgument(f"output must be a numpy array (a torch tensor's .numpy()) or a CUDA tensor, "
                                  f"not {type(output).__name__}")
        problems = [p for p, bad in ((f"dtype {output.dtype}, not int32", str(output.dtype) != "torch.int32"),
                                     (f"{output.dim()} dimensions, not 1", output.dim() != 1),
                                     ("not contiguous", not output.is_contiguous()),
                                     ("empty", output.numel() == 0)) if bad]  # type: ignore[attr-defined]
    else:
        problems = [p for p, bad in ((f"dtype {output.dtype}, not int32", output.dtype != np.int32),
                                     (f"{output.ndim} dimensions, not 1", output.ndim != 1),
                                     ("not C-contiguous", not output.flags.c_contiguous),
                                     ("read-only", not output.flags.writeable),
                                     ("empty", output.size == 0)) if bad]
    if problems:
        raise InvalidArgument(f"output array for the ids: {', '.join(problems)}")
    return output
