"""Streaming detokenization on the agent: a server generating text sends each sequence's new ids and
gets back the text they complete. Each sequence's decode state (the bytes of a character begun and not
yet ended, whether its leading space is still to drop) lives on the agent, so the server's CPU only
copies strings; one round trip steps every sequence of a generation step.

The host equivalent is ``Tokenizer.decode_stream()``: the same text, step for step."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import _core
from .errors import Error, InvalidArgument, from_code

_STEP = struct.Struct("<IIB3x")
_RESULT = struct.Struct("<Ii")
_FINISH = 1


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
        flags = [finish] * len(steps) if isinstance(finish, bool) else list(finish)
        if len(flags) != len(steps):
            raise InvalidArgument(f"{len(flags)} finish flags for {len(steps)} steps")
        arrays = [np.ascontiguousarray(ids, dtype="<i4") for _, ids in steps]
        head = b"".join(_STEP.pack(stream, len(a), _FINISH if f else 0) for (stream, _), a, f in zip(steps, arrays, flags))
        answer = self._request(b"D" + struct.pack("<I", len(steps)) + head + b"".join(a.tobytes() for a in arrays))
        results = [_RESULT.unpack_from(answer, i * _RESULT.size) for i in range(len(steps))]
        at = len(steps) * _RESULT.size
        texts = []
        for length, _ in results:
            texts.append(answer[at:at + length].decode())
            at += length
        out: list[str | Error] = []
        for text, (_, code) in zip(texts, results):  # failed steps' messages follow the texts, in order
            if code == 0:
                out.append(text)
                continue
            (n,) = struct.unpack_from("<I", answer, at)
            out.append(from_code(code, answer[at + 4:at + 4 + n].decode(errors="replace")))
            at += 4 + n
        return out
