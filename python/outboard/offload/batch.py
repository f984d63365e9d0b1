"""A batch's ids and per-text errors, whichever placement produced them, and the options a batch
is tokenized with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from .. import _core
from ..errors import Error, from_code

if TYPE_CHECKING:
    import asyncio
    from concurrent.futures import Future

Text = Union[str, bytes]

#: Longest text the host placement takes: the agent's --max-text-bytes default, so both agree.
MAX_TEXT_BYTES = 16 << 20


class Batch:
    """Ids of a batch: text i is ``ids[offsets[i]:offsets[i+1]]``; a failed text is empty and has
    its error in ``errors[i]``. From the gpu placement, ``ids`` views the caller's CUDA tensor. From
    the agent, ``ids`` views the registered buffer it wrote, and ``errors`` and ``agent`` are made
    from the native batch only when read (a batch's answer builds no list or dict on the way)."""

    __slots__ = ("ids", "offsets", "placement", "stages", "_errors", "_agent", "_native")

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, errors: list[Error | None] | None, placement: str,
                 agent: dict[str, int] | None = None) -> None:
        self.ids = ids
        self.offsets = offsets
        self.placement = placement
        #: The gpu placement's stages timed by CUDA events (copy_in, kernels, copy_out ns); empty elsewhere.
        self.stages: dict[str, int] = {}
        #: None: every text succeeded (host) or not read yet (agent)
        self._errors = errors
        self._agent = agent
        self._native: _core.AgentBatch | None = None

    @classmethod
    def from_agent(cls, native: _core.AgentBatch) -> Batch:
        batch = cls(native.ids, native.offsets, None, "agent")
        batch._native = native
        return batch

    @property
    def errors(self) -> list[Error | None]:
        if self._errors is None:
            self._errors = _errors(self._native.errors) if self._native is not None else [None] * len(self)
        return self._errors

    @property
    def agent(self) -> dict[str, int]:
        """What the agent reported (queue_ns, tokenize_ns, cpu_ns, put_ns, queued_before); empty on host."""
        if self._agent is None:
            self._agent = self._native.timing if self._native is not None else {}
        return self._agent

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        """Ids of text i; raises its error if it failed."""
        err = self.errors[i]
        if err is not None:
            raise err
        return self.ids[int(self.offsets[i]):int(self.offsets[i + 1])]

    @property
    def ok(self) -> bool:
        if self._native is not None:
            return self._native.ok
        return self._errors is None or all(e is None for e in self._errors)

    def __repr__(self) -> str:
        return f"Batch({len(self)} texts, {len(self.ids)} ids, {self.placement}{'' if self.ok else ', failed texts'})"


#: How a batch ended: its Batch, or the error that failed it as a whole.
Outcome = Union[Batch, BaseException]
#: Where a batch's outcome goes, once.
Finish = Callable[[Outcome], None]
#: Runs a host batch's work somewhere (this thread, a pool thread) and hands its outcome on.
HostRunner = Callable[[Callable[[], Batch], Finish], None]


@dataclass(frozen=True)
class Options:
    """How every text of a batch is tokenized; 0 is no limit for ``max_len`` and ``capacity``."""

    max_len: int = 0
    allow_special: bool = False
    utf8: str = "strict"
    add_special_tokens: bool = False
    capacity: int = 0

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments of the native calls (the agent's and the host's alike)."""
        return dict(allow_special=self.allow_special, utf8=self.utf8, add_special_tokens=self.add_special_tokens,
                    max_len=self.max_len, capacity=self.capacity)


def settle(future: asyncio.Future[Batch] | Future[Batch], outcome: Outcome) -> None:
    """Hands an outcome to the future (asyncio's or a thread's) it is awaited with, unless its caller
    gave up on it."""
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def host_batch(core: _core.Tokenizer, texts: list[Text], options: Options) -> Batch:
    """The batch tokenized in this process, by the per-text rules the agent's tokenize service runs
    (one native function for both: the same ids, errors and messages)."""
    ids, offsets, errors = core.encode_each(texts, **options.keywords(), max_text_bytes=MAX_TEXT_BYTES)
    return Batch(ids, offsets, None if errors is None else _errors(errors), "host")


def _errors(native: list[tuple[int, str] | None]) -> list[Error | None]:
    return [None if e is None else from_code(*e) for e in native]
