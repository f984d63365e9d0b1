"""The tokenize suite's consumer: the distinct payloads it sends (cut from a mixed corpus), and
what it does with the ids (the embedding lookup, numpy on the CPU or torch on a GPU)."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from ..errors import BadConfig

DIM = 768
POSITIONS = 2048  # the published sequence length; longer texts wrap around the position table


class Payloads:
    """Distinct texts of about ``size`` bytes: windows at fresh offsets of a mixed corpus, in an
    order that a seeded stride scatters over it. Each size has every offset once; a run that needs
    more fails naming the sizes (looking for a fresh random offset slowed to a halt near the end)."""

    def __init__(self, text: str, seed: int = 1) -> None:
        self.text = text
        self.rng = random.Random(seed)
        self.walks: dict[int, list[int]] = {}  # size -> [first offset, stride, windows taken]

    def take(self, size: int) -> str:
        span = max(1, len(self.text) - size)
        walk = self.walks.get(size)
        if walk is None:
            stride = self.rng.randrange(span // 3, span) | 1
            while math.gcd(stride, span) != 1:  # every offset once before any repeats
                stride += 2
            walk = self.walks[size] = [self.rng.randrange(span), stride, 0]
        first, stride, taken = walk
        if taken >= span:
            raise BadConfig(f"payloads of {size} B: all {span} offsets of the {len(self.text)}-character corpus "
                            "are taken; a larger corpus is needed for this many requests")
        walk[2] += 1
        start = (first + taken * stride) % span
        # Characters may be several bytes: trim to the byte budget.
        return self.text[start:start + size].encode()[:size].decode(errors="ignore")


def random_words(size: int, rng: random.Random) -> str:
    """The published experiment's text: random lowercase letters with a space every 5th character."""
    return "".join(" " if i % 5 == 4 else chr(97 + rng.randrange(26)) for i in range(size))


class Embedder:
    """word_embed[id] + pos_embed[position in its text], float32, numpy on the CPU."""

    def __init__(self, vocab: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.word = rng.standard_normal((vocab, DIM), dtype=np.float32)
        self.pos = rng.standard_normal((POSITIONS, DIM), dtype=np.float32)
        self.device = "cpu (numpy)"
        #: Whether agent batches must land in memory of the embedder's own (page-locked, for a GPU).
        self.pinned = False

    def host_buffer(self, ids: int) -> np.ndarray:
        """Consumer memory that ids are put in (by the host's copy, or the agent's write)."""
        return np.empty(ids, np.int32)

    def to_device(self, ids: np.ndarray, offsets: np.ndarray) -> Any:
        return ids, offsets  # already where the lookup runs

    def __call__(self, staged: Any) -> np.ndarray:
        ids, offsets = staged
        lengths = np.diff(offsets).astype(np.int64)
        starts = np.repeat(offsets[:-1].astype(np.int64), lengths)
        positions = (np.arange(len(ids), dtype=np.int64) - starts) % POSITIONS
        out = self.word.take(ids, axis=0)
        out += self.pos.take(positions, axis=0)
        return out


class TorchEmbedder:
    """The same lookup with torch on a CUDA device, as an inference server does it. Host buffers are
    pinned (page-locked), so the agent writes its ids into memory the GPU's copy engine reads: the
    ids go up with one asynchronous copy and no staging copy. Each stage synchronises, to be timed.
    A kernel launch and a synchronisation cost tens of µs here, so a one-text batch takes its
    positions from a table kept on the GPU (one gather) rather than computing them (five kernels)."""

    def __init__(self, vocab: int, seed: int = 0) -> None:
        import torch

        self.torch = torch
        self.cuda = torch.device("cuda")
        gen = torch.Generator().manual_seed(seed)
        self.word = torch.randn((vocab, DIM), generator=gen).to(self.cuda)
        self.pos = torch.randn((POSITIONS, DIM), generator=gen).to(self.cuda)
        self.device = f"cuda (torch {torch.__version__}, {torch.cuda.get_device_name()})"
        self.pinned = True
        self._pinned: list[tuple[int, int, Any]] = []  # (address, bytes, tensor) of each host buffer
        self._positions = torch.arange(1 << 16, device=self.cuda) % POSITIONS  # grows for longer texts
        # The last copy's and lookup's GPU time by CUDA events (ns): beside the wall clock, what the
        # launches and synchronisations cost is the difference.
        self.events_ns: dict[str, int] = {}
        self._events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]

    def host_buffer(self, ids: int) -> np.ndarray:
        t = self.torch.empty(ids, dtype=self.torch.int32, pin_memory=True)
        self._pinned.append((t.data_ptr(), t.numel() * 4, t))
        return t.numpy()

    def _host_tensor(self, ids: np.ndarray) -> Any:
        at = ids.ctypes.data
        for base, size, t in self._pinned:
            if base <= at and at + ids.nbytes <= base + size:
                return t[(at - base) // 4:(at - base) // 4 + len(ids)]
        return self.torch.from_numpy(ids.copy())  # a batch the pinned buffer could not hold

    def device_buffer(self, ids: int) -> Any:
        """GPU memory that ids are made in (the gpu placement)."""
        return self.torch.empty(ids, dtype=self.torch.int32, device=self.cuda)

    def to_device(self, ids: Any, offsets: np.ndarray) -> Any:
        torch = self.torch
        on_device = isinstance(ids, torch.Tensor) and ids.is_cuda  # the gpu placement's
        self._events[0].record()
        ids_d = ids if on_device else self._host_tensor(ids).to(self.cuda, non_blocking=True)
        offsets_d = None if len(offsets) == 2 else torch.from_numpy(offsets.astype(np.int64)).to(self.cuda,
                                                                                                  non_blocking=True)
        self._events[1].record()
        torch.cuda.synchronize()
        self.events_ns["copy"] = int(self._events[0].elapsed_time(self._events[1]) * 1e6)
        return ids_d, offsets_d

    def __call__(self, staged: Any) -> Any:
        torch = self.torch
        ids, offsets = staged
        n = len(ids)
        if offsets is None:  # one text: positions 0..n-1
            if n > len(self._positions):
                self._positions = torch.arange(2 * n, device=self.cuda) % POSITIONS
            positions = self._positions[:n]
        else:
            lengths = offsets[1:] - offsets[:-1]
            starts = torch.repeat_interleave(offsets[:-1], lengths, output_size=n)
            positions = (torch.arange(n, device=self.cuda) - starts) % POSITIONS
        self._events[2].record()
        out = self.word.index_select(0, ids)
        out += self.pos.index_select(0, positions)
        self._events[3].record()
        torch.cuda.synchronize()
        self.events_ns["embed"] = int(self._events[2].elapsed_time(self._events[3]) * 1e6)
        return out


def gpu_absent(model: str, embedder: Embedder | TorchEmbedder) -> str | None:
    """Why the tokenize suite has no gpu placement for ``model`` here (None: it has one)."""
    from .. import _core

    if not isinstance(embedder, TorchEmbedder):
        return "the embed runs on the CPU (no torch CUDA device)"
    if model not in ("gpt2", "bert-base-uncased"):
        return f"the GPU tokenizer has GPT-2's BPE and BERT's WordPiece, not {model}'s"
    return _core.cuda_usable()


def make_embedder(kind: str, vocab: int) -> Embedder | TorchEmbedder:
    """``numpy``, ``torch`` (CUDA required) or ``auto``: torch where a CUDA device is present."""
    if kind not in ("auto", "numpy", "torch"):
        raise ValueError(f"embed device '{kind}' is not one of auto, numpy, torch")
    if kind == "numpy":
        return Embedder(vocab)
    try:
        import torch

        usable = torch.cuda.is_available()
    except ImportError:
        usable = False
    if usable:
        return TorchEmbedder(vocab)
    if kind == "torch":
        raise RuntimeError("--embed torch needs torch with a CUDA device; none is usable here")
    return Embedder(vocab)
