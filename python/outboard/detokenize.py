"""Streaming detokenization on the agent: a server generating text sends each sequence's new ids and
gets back the text they complete. Each sequence's decode state (the bytes of a character begun and not
yet ended, whether its leading space is still to drop) lives on the agent, so the server's CPU only
copies strings; one round trip steps every sequence of a generation step.

The host equivalent is ``Tokenizer.decode_stream()``: the same text, step for step."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import _core
from .errors import Error, InvalidArgument, from_code

_STEP = np.dtype({"names": ["stream", "count", "flags"], "formats": ["<u4", "<u4", "u1"], "offsets": [0, 4, 8],
                  "itemsize": 12})
_RESULT = np.dtype([("length", "<u4"), ("code", "<i4")])


class Detokenizer:
    """One vocabulary on an agent's ``detokenize`` service. Made by ``Client.detokenizer(name)``; ``name``
    as for ``Client.tokenizer``: a name the agent resolves in its vocabulary directory, or a path of this
    machine's (a ``Path``, or a name with a "/"), whose bytes the agent is sent. One thread at a time."""

    def __init__(self, conn: _core.Connection, name: str | Path, *, timeout: float) -> None:
        self._conn, self._timeout = conn, timeout
        if isinstance(name, Path) or "/" in str(name):
            fmt = _core.vocab_format_of(str(name))
            if fmt is None:
                raise InvalidArgument(f"'{name}': the file name says no vocabulary format")
            payload = b"L" + bytes([fmt]) + Path(name).read_bytes()
        else:
            payload = b"O" + str(name).encode()
        self._tokenizer, self.vocab_size = struct.unpack("<II", self._request(payload))

    def _request(self, payload: bytes) -> bytes:
        return self._conn.request("detokenize", payload, self._timeout)

    def stream(self) -> int:
        """A new sequence's stream: a handle for ``step``. Closed by a finishing step or ``close``."""
        return struct.unpack("<I", self._request(b"S" + struct.pack("<I", self._tokenizer)))[0]

    def close(self, stream: int) -> None:
        """Closes a stream without its held bytes (an abandoned sequence)."""
        self._request(b"C" + struct.pack("<I", stream))

    def step(self, steps: Sequence[tuple[int, Sequence[int] | np.ndarray]], *,
             finish: Sequence[bool] | bool = False) -> list[str | Error]:
        """For each ``(stream, ids)``, the text those ids complete; with ``finish`` (one flag, or one per
        step) also what the stream held back (U+FFFD for a broken character), and the stream is closed.
        A step that fails (an unknown id or stream) is its error, in its place, and leaves its stream as
        it was; the others go on."""
        n = len(steps)
        flags = [finish] * n if isinstance(finish, bool) else list(finish)
        if len(flags) != n:
            raise InvalidArgument(f"{len(flags)} finish flags for {n} steps")
        # Built column by column: a server steps every running sequence each generation step.
        head = np.zeros(n, _STEP)
        head["stream"] = [stream for stream, _ in steps]
        head["count"] = counts = [len(ids) for _, ids in steps]
        head["flags"] = flags
        ids = np.fromiter(itertools.chain.from_iterable(ids for _, ids in steps), "<i4", sum(counts))
        answer = self._request(b"D" + struct.pack("<I", n) + head.tobytes() + ids.tobytes())
        results = np.frombuffer(answer, _RESULT, n)
        at = results.nbytes
        out: list[str | Error] = []
        for length in results["length"].tolist():
            out.append(answer[at:at + length].decode())
            at += length
        for i in np.flatnonzero(results["code"]).tolist():  # failed steps' messages follow the texts, in order
            (size,) = struct.unpack_from("<I", answer, at)
            out[i] = from_code(int(results["code"][i]), answer[at + 4:at + 4 + size].decode(errors="replace"))
            at += 4 + size
        return out
