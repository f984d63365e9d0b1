"""Checkpoint offload: the trainer snapshots its state into staging memory and goes on; the agent
persists it (safetensors + a JSON manifest, fsynced, renamed into place, pruned to ``keep_last``).

A checkpoint is a directory ``step-<12 digits>`` holding ``tensors.safetensors`` and
``manifest.json``; ``load()`` (or ``safetensors`` alone) reads it back without an agent::

    with outboard.Checkpointer("ckpt", keep_last=3) as ck:
        for step in range(steps):
            train_step()
            if step % 100 == 0:
                ck.save(step, {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": e})
    state = outboard.checkpoint.load("ckpt").state
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import os
import struct
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from . import _core
from .client import Client, connect
from .errors import BadState, Error, InvalidArgument, NotFound, TimedOut, TooBig

Policy = Literal["block", "skip", "queue-one"]

#: Seconds the agent may take to persist one checkpoint before save()/wait() report it failed.
PERSIST_TIMEOUT_S = 600.0
#: Where each tensor starts in the staging memory: cache-line aligned, as numpy and torch like.
ALIGN = 64
#: Bytes load() reads at a time from a checkpoint's file on this host.
LOAD_PIECE = 1 << 20
#: Entries status() keeps of its lists (``skipped_steps``, ``durable_log``): the newest.
STATUS_LOG = 256
#: Staging grows in steps of this many bytes (when not fixed by ``staging_bytes``).
STAGING_QUANTUM = 1 << 20
TENSORS_FILE = "tensors.safetensors"
MANIFEST_FILE = "manifest.json"
LOCK_FILE = ".outboard-lock"  # the agent's, while a checkpointer has the directory open
FORMAT, FORMAT_VERSION = "outboard-checkpoint", 1

_VERSION = 3  # services/checkpoint_wire.h
_OPEN, _SAVE, _CLOSE, _PIECE, _LIST, _READ = 0, 1, 2, 3, 4, 5
_FILES = {TENSORS_FILE: 0, MANIFEST_FILE: 1}  # checkpoint_wire::File
#: Bytes of one read of a checkpoint's file through the agent (its kMaxPieceBytes is 8 MiB).
READ_PIECE = 4 << 20
#: Reads through the agent in flight while load() takes the piece before them.
READ_AHEAD = 2
#: safetensors' dtype names by wire code, in checkpoint_wire::Dtype's order.
_DTYPE_NAMES = ("BOOL", "U8", "I8", "U16", "I16", "F16", "BF16", "U32", "I32", "F32", "U64", "I64", "F64")
# numpy's dtypes by wire code (BF16: none in numpy).
_NUMPY_CODES = {np.dtype(t): i for i, t in enumerate(
    (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.float16, None, np.uint32, np.int32, np.float32,
     np.uint64, np.int64, np.float64)) if t is not None}


_walker: tuple[Any, Any] | None = None  # (torch module or None, its StateWalker)


def _state_walker() -> _core.StateWalker:
    """The walker of states, made again once this process imported torch (a state holding torch
    tensors did): it looks torch's types and dtypes up once, not per tensor."""
    global _walker
    torch = sys.modules.get("torch")
    if _walker is None or _walker[0] is not torch:
        tensor, strided = (torch.Tensor, torch.strided) if torch is not None else (None, None)
        codes = _torch_codes(torch) if torch is not None else {}
        _walker = (torch, _core.StateWalker(np.ndarray, np.generic, np.asarray, Mapping, _NUMPY_CODES, tensor,
                                            codes, strided))
    return _walker[1]


def _torch_codes(torch: Any) -> dict[Any, int]:
    """torch's dtypes by wire code (the unsigned ones of 16 to 64 bits where this torch has them)."""
    codes = {torch.bool: 0, torch.uint8: 1, torch.int8: 2, torch.int16: 4, torch.float16: 5,
             torch.bfloat16: 6, torch.int32: 8, torch.float32: 9, torch.int64: 11, torch.float64: 12}
    for name, code in (("uint16", 3), ("uint32", 7), ("uint64", 10)):
        if hasattr(torch, name):
            codes[getattr(torch, name)] = code
    return codes


def flatten(state: Any) -> tuple[list[_core.StateLeaf], bytes, bytes]:
    """The state's tensors, its plan key and its tree as JSON text. Each tensor is a leaf named by
    its path (e.g. "model.fc.weight") with its value, wire dtype, shape, bytes and gather source (the
    array, a contiguous CPU tensor's (address, bytes), or None when numpy or torch must copy it); the
    tree holds it as {"tensor": name}. States with equal keys (names, dtypes, shapes) stage alike.
    Dict keys may be str, int, bool or None (a torch optimizer's state is keyed by int); values
    tensors, numpy arrays and scalars, dicts, lists, tuples, str, int (64-bit), float, bool, None and
    bytes. Native (python/bindings/checkpoint.cpp): a save walks the whole state (ResNet-20: 193
    tensors)."""
    return _state_walker().walk(state)


class _Plan:
    """Where a state's tensors go in a staging slot, and their part of the save request: the same for
    every save of a state of the same structure, so made once."""

    def __init__(self, leaves: list[_core.StateLeaf], key: bytes) -> None:
        self.key = key
        self.offsets, at = [], 0
        for leaf in leaves:
            self.offsets.append(at)
            at += -(-leaf.nbytes // ALIGN) * ALIGN
        self.bytes = at
        self._at: dict[int, tuple[list[int], bytes]] = {}

    def at(self, leaves: list[_core.StateLeaf], base: int) -> tuple[list[int], bytes]:
        """The leaves' offsets in the staging, and the request's tensor table, for the slot at ``base``."""
        cached = self._at.get(base)
        if cached is None:
            offsets = [base + offset for offset in self.offsets]
            parts = [struct.pack("<I", len(leaves))]
            for leaf, offset in zip(leaves, offsets):
                name = leaf.name.encode()
                parts += [struct.pack("<I", len(name)), name, struct.pack("<BB", leaf.code, len(leaf.shape)),
                          struct.pack(f"<{len(leaf.shape)}Q", *leaf.shape), struct.pack("<QQ", offset, leaf.nbytes)]
            cached = self._at[base] = (offsets, b"".join(parts))
        return cached


def staging_size(state: Any) -> int:
    """The staging bytes one snapshot of ``state`` takes: ``staging_bytes`` for a checkpointer that
    should never grow its staging (times 2 for "queue-one"). Take it of the state as it will be
    saved: a torch optimizer's buffers exist only after its first step."""
    leaves, key, _ = flatten(state)
    return _Plan(leaves, key).bytes


def _copy_in(leaves: list[_core.StateLeaf], offsets: list[int], region: Any) -> None:
    """The snapshot: each leaf's bytes to its offset in the staging, in one native call for contiguous
    CPU arrays and tensors (a torch copy_ per tensor costs ~5 µs of dispatch: most of ResNet-20's
    snapshot); the others through numpy or torch."""
    sources = [leaf.source for leaf in leaves]
    if all(leaf.source is not None for leaf in leaves):
        region.gather(sources, offsets)
        return
    staging, typed, gathered = region.array(), {}, []
    for leaf, at in zip(leaves, offsets):
        v = leaf.value
        if leaf.source is not None:
            gathered.append(at)
        elif isinstance(v, np.ndarray):
            np.copyto(staging[at:at + leaf.nbytes].view(v.dtype.newbyteorder("=")).reshape(v.shape), v)
        elif leaf.nbytes:
            torch = sys.modules["torch"]
            view = typed.get(v.dtype)
            if view is None:
                view = typed[v.dtype] = torch.from_numpy(staging).view(v.dtype)
            first = at // v.element_size()
            with torch.no_grad():
                view[first:first + v.numel()].view(v.shape).copy_(v)
    region.gather([leaf.source for leaf in leaves if leaf.source is not None], gathered)


def _encode_save(handle: int, step: int, descriptor: bytes, table: bytes, state: bytes) -> bytes:
    return b"".join((struct.pack("<BBIQI", _VERSION, _SAVE, handle, step, len(descriptor)), descriptor, table,
                     struct.pack("<I", len(state)), state))


@dataclass
class _Slot:
    """A part of the staging memory that holds one snapshot until the agent persisted it."""
    base: int
    step: int | None = None  # the snapshot in it
    state: Literal["free", "queued", "persisting"] = "free"
    payload: bytes = b""
    saved_at: float = 0.0
    pieces: tuple[list[int], list[int]] = ([], [])  # an in-band save's tensors: staging offsets, bytes


@dataclass
class Status:
    """What ``Checkpointer.status()`` reports. Times in seconds; ``durable_s`` runs from save() to the
    agent's answer that the checkpoint is on disk."""
    policy: str
    in_flight: int | None = None
    queued: int | None = None
    last_persisted: int | None = None
    persisted: int = 0
    skipped: int = 0
    superseded: int = 0
    bytes: int = 0
    total_bytes: int = 0
    snapshot_s: float = 0.0
    persist_s: float = 0.0
    durable_s: float = 0.0
    staging_bytes: int = 0
    error: str | None = None
    skipped_steps: list[int] = field(default_factory=list)
    durable_log: list[float] = field(default_factory=list)  # each checkpoint's durable_s


class Checkpointer:
    """Saves a training state to ``dir`` through an agent: save() copies the tensors into staging
    memory the agent reads and returns; the agent writes, fsyncs and prunes while training goes on.

    ``client``: a ``Client`` whose agent was started with ``--checkpoint-root`` above ``dir``; None
    starts a local agent rooted at ``dir``. A TLS client's directories lie in its own under that
    root (``tenants/<its identity>-<digest>``: no tenant reaches another's), ``dir`` relative to it
    or inside it; ``self.dir`` is where the agent put it. ``staging_bytes``: the staging memory
    (None: sized to the state, growing with it). ``policy`` when a save finds the previous one still persisting:
    "block" until it is done, "skip" this one, or "queue-one" (a second staging slot: the newest
    waiting snapshot replaces an older waiting one). One thread saves; status(), wait() and load()
    may be called from any.

    Over TLS the agent cannot read the staging (one-sided access would bypass the encryption), so
    the sender thread sends it the snapshot's bytes in sealed pieces instead: the same checkpoint,
    at the link's encrypted speed."""

    def __init__(self, dir: str | os.PathLike[str], client: Client | None = None, *, keep_last: int = 3,
                 staging_bytes: int | None = None, policy: Policy = "block",
                 timeout: float = PERSIST_TIMEOUT_S) -> None:
        if policy not in ("block", "skip", "queue-one"):
            raise InvalidArgument(f"policy {policy!r} is not 'block', 'skip' or 'queue-one'")
        if keep_last < 0:
            raise InvalidArgument(f"keep_last {keep_last} is negative (0 keeps every checkpoint)")
        self.policy, self.timeout = policy, timeout
        if client is None:
            Path(dir).mkdir(parents=True, exist_ok=True)
            client = connect(agent_args=("--checkpoint-root", str(Path(dir).absolute())))
            self._own_client = True
        else:
            self._own_client = False
        self.client = client
        self._in_band = client.connection.security != "plaintext"
        # A plaintext client shares the agent's host and user: its paths are the agent's. A TLS client's
        # go to its own directory under the agent's root, which the answer names.
        path = str(dir if self._in_band else Path(dir).absolute()).encode()
        try:
            answer = client.request("checkpoint", struct.pack("<BBII", _VERSION, _OPEN, keep_last, len(path)) + path,
                                    timeout=timeout)
        except BaseException:
            if self._own_client:
                client.close()
            raise
        self._handle, n = struct.unpack_from("<II", answer)
        #: The directory on the agent's host (where load() reads, when that is this host or a shared filesystem).
        self.dir = Path(answer[8:8 + n].decode())
        (m,) = struct.unpack_from("<I", answer, 8 + n)
        self._token = bytes(answer[12 + n:12 + n + m])  # what the agent wrote into the directory's lock file
        self._slots_wanted = 2 if policy == "queue-one" else 1
        self._fixed = staging_bytes
        self._region: Any = None
        self._staging = np.empty(0, np.uint8)
        self._slots: list[_Slot] = []
        self._plan: _Plan | None = None
        self._cv = threading.Condition()
        self._status = Status(policy)
        self._error: Error | None = None
        self._closed = False
        self._sender = threading.Thread(target=self._send_loop, name="outboard-checkpoint", daemon=True)
        self._sender.start()
        if staging_bytes is not None:
            self._allocate(staging_bytes // self._slots_wanted)
            self._staging.fill(0)  # its pages faulted in now, not in the first save

    # ---- saving
    def save(self, step: int, state: Any) -> bool:
        """Snapshots ``state`` for step ``step`` and returns once the copy is made: True when it
        will be persisted, False when the "skip" policy dropped it. Raises the error of an earlier
        save that failed to persist (naming the path and the OS error), once."""
        if not 0 <= step <= 999_999_999_999:
            raise InvalidArgument(f"step {step} is outside 0..999999999999")
        t0 = time.perf_counter()
        leaves, key, tree = flatten(state)
        plan = self._plan
        if plan is None or plan.key != key:
            plan = self._plan = _Plan(leaves, key)
        with self._cv:
            self._raise_error()
            if self._closed:
                raise BadState("the checkpointer is closed")
            slot = self._take_slot(step, plan.bytes)
            if slot is None:
                return False
        try:
            offsets, table = plan.at(leaves, slot.base)
            _copy_in(leaves, offsets, self._region)
            descriptor = b"" if self._in_band else self._region.descriptor
            payload = _encode_save(self._handle, step, descriptor, table, tree)
        except BaseException:
            with self._cv:
                slot.state, slot.step = "free", None
                self._cv.notify_all()
            raise
        with self._cv:
            slot.payload, slot.step, slot.saved_at, slot.state = payload, step, t0, "queued"
            if self._in_band:
                slot.pieces = (offsets, [leaf.nbytes for leaf in leaves])
            self._status.snapshot_s = time.perf_counter() - t0
            self._status.queued = step
            self._cv.notify_all()
        return True

    def _take_slot(self, step: int, need: int) -> _Slot | None:
        """A slot for the snapshot, by the policy, marked as being filled (state "persisting" keeps the
        sender off it). Called with the lock held."""
        if not self._slots or need > self._slot_bytes():
            self._grow(need)
        while True:
            free = [s for s in self._slots if s.state == "free"]
            if free:
                slot = free[0]
                break
            waiting = [s for s in self._slots if s.state == "queued"]
            if self.policy == "queue-one" and waiting:
                slot = waiting[0]
                self._status.superseded += 1
                break
            if self.policy == "skip":
                self._status.skipped += 1
                self._status.skipped_steps = [*self._status.skipped_steps[-(STATUS_LOG - 1):], step]
                return None
            if not self._cv.wait(self.timeout):
                raise TimedOut(f"no staging slot freed within {self.timeout} s (the agent is still persisting)")
            self._raise_error()
        slot.state, slot.step = "persisting", None
        return slot

    def _slot_bytes(self) -> int:
        return self._slots[1].base if len(self._slots) > 1 else self._staging.size

    def _grow(self, need: int) -> None:
        """Staging for snapshots of ``need`` bytes: a fixed ``staging_bytes`` that is too small is an
        error; else, once nothing is in flight, new memory. Called with the lock held."""
        if self._fixed is not None:
            raise TooBig(f"the state takes {need} B of staging, over staging_bytes {self._fixed} B "
                         f"({self._slots_wanted} slot(s) of {self._fixed // self._slots_wanted} B)")
        while any(s.state != "free" for s in self._slots):
            if not self._cv.wait(self.timeout):
                raise TimedOut(f"the agent did not finish persisting within {self.timeout} s")
            self._raise_error()
        self._allocate(-(-max(need, 1) // STAGING_QUANTUM) * STAGING_QUANTUM)

    def _allocate(self, slot_bytes: int) -> None:
        slot_bytes = max(slot_bytes // ALIGN * ALIGN, ALIGN)  # every slot, and so every tensor, aligned
        self._region = None  # the old region goes before the new one is taken
        self._region = self.client.connection.allocate_memory(slot_bytes * self._slots_wanted)
        self._staging = self._region.array()
        self._slots = [_Slot(base=i * slot_bytes) for i in range(self._slots_wanted)]
        self._status.staging_bytes = self._staging.size

    def _send_loop(self) -> None:
        # One request at a time, as the agent persists them: the next waits here, where "queue-one"
        # may still replace it.
        while True:
            with self._cv:
                while not self._closed and not any(s.state == "queued" for s in self._slots):
                    self._cv.wait()
                if self._closed and not any(s.state == "queued" for s in self._slots):
                    return
                slot = min((s for s in self._slots if s.state == "queued"), key=lambda s: s.saved_at)
                slot.state = "persisting"
                step, payload, saved_at, pieces = slot.step, slot.payload, slot.saved_at, slot.pieces
                self._status.in_flight, self._status.queued = step, None
            error, answer = None, {}
            try:
                if self._in_band:
                    prefix = struct.pack("<BBIQ", _VERSION, _PIECE, self._handle, step)
                    reply = _core.save_in_band(self.client.connection, payload, prefix, self._staging, *pieces,
                                               timeout=self.timeout)
                else:
                    reply = self.client.request("checkpoint", payload, timeout=self.timeout)
                answer = json.loads(reply)
            except Error as e:
                error = type(e)(f"checkpoint of step {step} failed: {e.message}")
            with self._cv:
                slot.state, slot.step, slot.payload, slot.pieces = "free", None, b"", ([], [])
                self._status.in_flight = None
                if error is not None:
                    self._error = error
                    self._status.error = str(error)
                else:
                    s = self._status
                    s.last_persisted, s.persisted = step, s.persisted + 1
                    s.bytes, s.total_bytes = answer["bytes"], s.total_bytes + answer["bytes"]
                    s.persist_s, s.durable_s = answer["persist_s"], time.perf_counter() - saved_at
                    s.durable_log = [*s.durable_log[-(STATUS_LOG - 1):], s.durable_s]
                self._cv.notify_all()

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    # ---- waiting and looking
    def wait(self, step: int | None = None, *, timeout: float | None = None) -> bool:
        """Until every snapshot taken so far is persisted (``step``: until that one is, or was
        dropped: False). Raises the error of a save that failed to persist."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)

        def busy() -> bool:
            if step is None:
                return any(s.state != "free" for s in self._slots)
            return any(s.step == step for s in self._slots)

        with self._cv:
            while busy():
                left = deadline - time.monotonic()
                if left <= 0 or not self._cv.wait(left):
                    raise TimedOut(f"checkpoints still persisting after {timeout or self.timeout} s")
            self._raise_error()
            if step is None or self._status.last_persisted == step or step in self._status.skipped_steps:
                return step is None or self._status.last_persisted == step
        return step in self._steps()

    def status(self) -> Status:
        with self._cv:
            s = self._status
            return Status(**{**s.__dict__, "skipped_steps": list(s.skipped_steps), "durable_log": list(s.durable_log)})

    def latest(self) -> int | None:
        """The newest step with a checkpoint in the directory (not checked: load() checks)."""
        steps = self._steps()
        return steps[-1] if steps else None

    def load(self, step: int | None = None, map_location: Any = None, *, through_agent: bool | None = None) -> Any:
        """The state of checkpoint ``step`` (None: the newest intact one), every file checked against
        the manifest's size and sha256, once this checkpointer's snapshots are persisted; checkpoints
        skipped as damaged are named in a warning. ``through_agent``: read the files through the
        agent (None: unless ``self.dir`` here is the agent's directory, as it is not on another host)."""
        if not self._closed:
            self.wait()
        if not self._through_agent(through_agent):
            loaded = load(self.dir, step, map_location=map_location)
        else:
            where = Path(f"{self.dir} (on the agent)")
            loaded = _load(str(where), self._steps(True),
                           lambda s: self._read_through(s, where / f"step-{s:012d}", map_location), step)
        for s, why in loaded.skipped:
            warnings.warn(f"checkpoint step {s} skipped: {why}", stacklevel=2)
        return loaded.state

    def _through_agent(self, asked: bool | None = None) -> bool:
        if self._closed:
            if asked:
                raise BadState("the checkpointer is closed: its directory is no longer open on the agent")
            return False
        return not self._here() if asked is None else asked

    def _here(self) -> bool:
        """Whether ``self.dir`` on this host is the agent's directory: its lock file holds the token the
        agent wrote there when it opened it (a directory at the same path elsewhere does not)."""
        try:
            return (self.dir / LOCK_FILE).read_bytes() == self._token
        except OSError:
            return False

    def _steps(self, through_agent: bool | None = None) -> list[int]:
        if not self._through_agent(through_agent):
            return _steps(self.dir)
        answer = self.client.request("checkpoint", struct.pack("<BBI", _VERSION, _LIST, self._handle),
                                     timeout=self.timeout)
        return list(struct.unpack_from(f"<{struct.unpack_from('<I', answer)[0]}Q", answer, 4))

    def _read_through(self, step: int, path: Path, map_location: Any) -> Any:
        """Checkpoint ``step`` read through the agent (``path``: where it lies there, for errors) and
        checked as a local load checks it: nothing of it goes to disk here."""
        manifest = _manifest(path / MANIFEST_FILE, lambda: b"".join(self._pieces(step, MANIFEST_FILE, path)))
        return _state(path, manifest, lambda size: self._pieces(step, TENSORS_FILE, path, size), map_location)

    def _pieces(self, step: int, name: str, path: Path, size: int | None = None) -> Iterator[memoryview]:
        """File ``name`` of checkpoint ``step``, read through the agent in pieces of READ_PIECE, the next
        READ_AHEAD asked for while the caller takes this one; Damaged if it is missing, if its size is
        not ``size`` (None: any), or if it ends short of it."""
        def read(at: int) -> bytes:
            try:
                return self.client.request("checkpoint", struct.pack("<BBIQBQI", _VERSION, _READ, self._handle, step,
                                                                     _FILES[name], at, READ_PIECE), timeout=self.timeout)
            except NotFound:
                raise Damaged(f"{path / name} is missing") from None

        answer = read(0)
        end = struct.unpack_from("<Q", answer)[0]
        if size is not None and end != size:
            raise Damaged(f"{path / name} has {end} B, the manifest says {size} B")
        offsets = iter(range(READ_PIECE, end, READ_PIECE))
        with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="outboard-load") as ahead:
            following = deque(ahead.submit(read, offset) for offset in itertools.islice(offsets, READ_AHEAD))
            for at in range(0, end, READ_PIECE):
                if len(answer) - 8 != min(READ_PIECE, end - at):
                    raise Damaged(f"{path / name} ended at {at + len(answer) - 8} B of its {end} B")
                yield memoryview(answer)[8:]
                if following:
                    answer = following.popleft().result()
                    following.extend(ahead.submit(read, offset) for offset in itertools.islice(offsets, 1))

    # ---- closing
    def close(self) -> None:
        """Waits for the snapshots taken to be persisted, then releases the directory (and the
        local agent this checkpointer started)."""
        if self._closed:
            return
        try:
            self.wait()
        finally:
            with self._cv:
                self._closed = True
                self._cv.notify_all()
            self._sender.join(self.timeout)
            try:
                if self.client.connection.is_open:
                    self.client.request("checkpoint", struct.pack("<BBI", _VERSION, _CLOSE, self._handle),
                                        timeout=self.timeout)
            finally:
                self._region, self._staging = None, np.empty(0, np.uint8)
                if self._own_client:
                    self.client.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- reading checkpoints back (no agent needed)
@dataclass
class Loaded:
    step: int
    state: Any
    skipped: list[tuple[int, str]]  # newer checkpoints found damaged, and why


class Damaged(Error):
    """A checkpoint whose files do not match its manifest."""


def _steps(directory: Path) -> list[int]:
    steps = []
    for p in directory.glob("step-" + "[0-9]" * 12):
        if p.is_dir():
            steps.append(int(p.name[5:]))
    return sorted(steps)


def _read(path: Path, map_location: Any) -> Any:
    manifest = _manifest(path / MANIFEST_FILE, (path / MANIFEST_FILE).read_bytes)
    return _state(path, manifest, lambda size: _file_pieces(path / TENSORS_FILE, size), map_location)


def _manifest(f: Path, read: Callable[[], bytes]) -> dict[str, Any]:
    """The manifest ``read`` returns, checked to be one this format writes: it lists the tensors
    file, with its size and sha256, and no other."""
    try:
        manifest = json.loads(read())
    except FileNotFoundError:
        raise Damaged(f"{f} is missing") from None
    except (OSError, ValueError, RecursionError) as e:
        raise Damaged(f"{f} is unreadable: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise Damaged(f"{f} is not a {FORMAT} manifest of version {FORMAT_VERSION}")
    files = manifest.get("files")
    if not isinstance(files, dict) or TENSORS_FILE not in files:
        raise Damaged(f"{f} lists no {TENSORS_FILE}")
    if len(files) != 1:
        raise Damaged(f"{f} lists files this format does not write: {sorted(set(files) - {TENSORS_FILE})}")
    info = files[TENSORS_FILE]
    if not isinstance(info, dict) or type(info.get("bytes")) is not int or not isinstance(info.get("sha256"), str):
        raise Damaged(f"{f} lists {TENSORS_FILE} oddly: {str(info)[:200]}")
    return manifest


def _state(path: Path, manifest: dict[str, Any], pieces: Callable[[int], Iterator[memoryview]],
           map_location: Any) -> Any:
    """The state of the checkpoint at ``path`` that ``manifest`` describes, its tensors file streamed
    by ``pieces(size)`` (Damaged unless the file has that size)."""
    tree = manifest.get("state")
    with _TensorSink(path / TENSORS_FILE, manifest["files"][TENSORS_FILE], _uses_torch(tree)) as sink:
        for piece in pieces(sink.size):
            sink.write(piece)
        return _rebuild(tree, sink.finish(), map_location)


def _file_pieces(f: Path, size: int) -> Iterator[memoryview]:
    """File ``f`` in pieces of LOAD_PIECE, read into two buffers in turn (a piece is _TensorSink's until
    the next is written); Damaged unless it has ``size`` bytes."""
    buffers = [memoryview(bytearray(LOAD_PIECE)) for _ in range(2)]
    try:
        with open(f, "rb") as stream:
            actual = os.fstat(stream.fileno()).st_size
            if actual != size:
                raise Damaged(f"{f} has {actual} B, the manifest says {size} B")
            for turn in itertools.count():
                buffer = buffers[turn % 2]
                if not (n := stream.readinto(buffer)):
                    return
                yield buffer[:n]
    except FileNotFoundError:
        raise Damaged(f"{f} is missing") from None
    except OSError as e:
        raise Damaged(f"{f}: {e.strerror or e}") from None


def _uses_torch(tree: Any) -> bool:
    if isinstance(tree, dict):
        return "torch" in tree or any(_uses_torch(v) for v in tree.values())
    if isinstance(tree, list):
        return any(_uses_torch(v) for v in tree)
    return False


class _TensorSink:
    """A safetensors file's bytes, taken in order as they come (from a disk, or through the agent),
    into the tensors they hold: each allocated once, as safetensors' own reader allocates it, and the
    whole file hashed on the way, so a load reads the file once and holds the checkpoint once
    (safetensors reads files through a mapping that a hash pass must read first, or whole buffers: a
    copy more). A damaged file is named by its sha256 where that differs, else by what is wrong in
    its header (safetensors' rules: the tensors cover the data back to back). ``pt``: torch tensors.
    The hash runs on a thread of its own (hashlib lets go of the GIL) while the bytes are placed, so a
    piece written stays the sink's until the next write returns; it is the load's slowest part."""

    def __init__(self, f: Path, info: dict[str, Any], pt: bool) -> None:
        self.f, self.size, self.sha256 = f, info["bytes"], info["sha256"]
        self.torch = None
        if pt:
            try:
                import torch
            except ImportError:
                raise NotFound(f"{f} holds torch tensors: reading them needs torch (pip install torch)") from None
            self.torch = torch
        self.hash = hashlib.sha256()
        self.hashing = ThreadPoolExecutor(1, thread_name_prefix="outboard-load-sha256")
        self.hashed: Future[None] | None = None  # the hash of the piece written last
        self.header = bytearray()
        self.tensors: dict[str, Any] | None = None
        self.spans: list[np.ndarray] = []  # the tensors' bytes in the order the data holds them
        self.span, self.span_at = 0, 0  # where the next data byte goes
        self.error: str | None = None

    def __enter__(self) -> _TensorSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.hashing.shutdown()

    def write(self, piece: memoryview) -> None:
        if self.hashed is not None:
            self.hashed.result()
        self.hashed = self.hashing.submit(self.hash.update, piece)
        if self.error is None and self.tensors is None:
            piece = self._take_header(piece)
        while len(piece) and self.span < len(self.spans):
            dst = self.spans[self.span]
            n = min(len(dst) - self.span_at, len(piece))
            dst[self.span_at:self.span_at + n] = np.frombuffer(piece[:n], np.uint8)
            piece, self.span_at = piece[n:], self.span_at + n
            if self.span_at == len(dst):
                self.span, self.span_at = self.span + 1, 0

    def _take_header(self, piece: memoryview) -> memoryview:
        """What of ``piece`` follows the header, once the header came whole and its tensors are allocated."""
        for _ in range(2):  # the header's length, then its text
            need = 8 if len(self.header) < 8 else 8 + int.from_bytes(self.header[:8], "little")
            if need > self.size:
                self.error = (f"its header of {need - 8} B does not fit its {self.size} B" if need > 8 else
                              f"its {self.size} B hold no header length")
                return piece[:0]
            took = min(len(piece), need - len(self.header))
            self.header += piece[:took]
            piece = piece[took:]
            if len(self.header) < need:
                return piece
        try:
            self._allocate(json.loads(bytes(self.header[8:])), self.size - len(self.header))
        except (ValueError, RecursionError) as e:
            self.error = f"its header is not JSON: {e}"
        except _Bad as e:
            self.error = str(e)
        return piece if self.error is None else piece[:0]

    def _allocate(self, header: Any, data: int) -> None:
        if not isinstance(header, dict):
            raise _Bad("its header is not a JSON object")
        torch = self.torch
        if torch is not None:
            kinds = {_DTYPE_NAMES[code]: (t, t.itemsize) for t, code in _torch_codes(torch).items()}
        else:
            kinds = {_DTYPE_NAMES[code]: (t.newbyteorder("<"), t.itemsize) for t, code in _NUMPY_CODES.items()}
        spans = []
        for name, t in header.items():
            if name == "__metadata__":
                continue
            shape, offsets = (t.get("shape"), t.get("data_offsets")) if isinstance(t, dict) else (None, None)
            if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                    and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
                raise _Bad(f"tensor {name!r} is described oddly: {str(t)[:200]}")
            kind = kinds.get(t.get("dtype"))
            if kind is None:
                raise _Bad(f"tensor {name!r} has dtype {t.get('dtype')!r}, which {'numpy' if torch is None else 'torch'} "
                           "does not read here")
            nbytes = math.prod(shape) * kind[1]
            if offsets[1] - offsets[0] != nbytes:
                raise _Bad(f"tensor {name!r} spans {offsets} for the {nbytes} B of {t['dtype']} {shape}")
            spans.append((offsets[0], name, kind[0], shape, nbytes))
        at = 0
        for begin, name, *_, nbytes in sorted(spans, key=lambda span: (span[0], span[4])):  # empty ones first
            if begin != at:
                raise _Bad(f"tensor {name!r} begins at {begin} B of the data where {at} B was next")
            at += nbytes
        if at != data:
            raise _Bad(f"its tensors take {at} B of its {data} B of data")
        self.tensors, placed = {}, []
        for begin, name, dtype, shape, nbytes in spans:
            if torch is not None:
                raw = torch.empty(nbytes, dtype=torch.uint8)
                self.tensors[name] = raw.view(dtype).reshape(shape)
                raw = raw.numpy()
            else:
                raw = np.empty(nbytes, np.uint8)
                self.tensors[name] = raw.view(dtype).reshape(shape)
            if nbytes:
                placed.append((begin, raw))
        self.spans = [raw for _, raw in sorted(placed, key=lambda p: p[0])]

    def finish(self) -> dict[str, Any]:
        """The tensors, once the whole file came and is the one its manifest lists."""
        if self.hashed is not None:
            self.hashed.result()
        if self.hash.hexdigest() != self.sha256:
            raise Damaged(f"{self.f}: sha256 differs from the manifest's")
        if self.error is not None:
            raise Damaged(f"{self.f}: {self.error}")
        assert self.tensors is not None, "a file of its size has a header or an error"
        return self.tensors


class _Bad(Exception):
    """What is wrong in a safetensors header (_TensorSink)."""


def _rebuild(node: Any, tensors: dict[str, Any], map_location: Any) -> Any:
    if not isinstance(node, dict) or len(node) == 0:
        raise Damaged(f"state node {node!r} is not one this format writes")
    if "tensor" in node:
        t = tensors[node["tensor"]]
        if "torch" in node:
            return t.to(map_location if map_location is not None else node["torch"])
        return t[()] if node.get("scalar") else t
    if "dict" in node:
        return {k: _rebuild(v, tensors, map_location) for k, v in node["dict"]}
    if "list" in node:
        return [_rebuild(v, tensors, map_location) for v in node["list"]]
    if "tuple" in node:
        return tuple(_rebuild(v, tensors, map_location) for v in node["tuple"])
    if "v" in node:
        return node["v"]
    if "float" in node:
        return float(node["float"])
    if "bytes" in node:
        return base64.b64decode(node["bytes"])
    raise Damaged(f"state node with keys {sorted(node)} is not one this format writes")


def load(directory: str | os.PathLike[str], step: int | None = None, *, map_location: Any = None) -> Loaded:
    """Reads checkpoint ``step`` of ``directory`` (None: the newest intact one, skipping damaged ones),
    checking each file's size and sha256 against the manifest as it reads it, once. Needs torch for
    states saved from torch tensors; no agent."""
    directory = Path(directory)
    return _load(str(directory), _steps(directory), lambda s: _read(directory / f"step-{s:012d}", map_location), step)


def _load(where: str, steps: list[int], read: Callable[[int], Any], step: int | None) -> Loaded:
    """Checkpoint ``step`` (None: the newest of ``steps`` that ``read`` reads intact) of ``where``."""
    if step is not None:
        if step not in steps:
            raise NotFound(f"no checkpoint of step {step} in {where}")
        steps = [step]
    skipped: list[tuple[int, str]] = []
    for s in reversed(steps):
        try:
            return Loaded(s, read(s), skipped)
        except (Damaged, KeyError, ValueError, TypeError) as e:
            skipped.append((s, e.message if isinstance(e, Damaged) else f"unreadable: {e!r}"))
    reasons = "; ".join(f"step {s}: {why}" for s, why in skipped)
    raise NotFound(f"no intact checkpoint in {where}" + (f" ({reasons})" if reasons else ""))
