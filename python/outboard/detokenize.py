"""Streaming detokenization on the agent: a server generating text sends each sequence's new ids and
gets back the text they complete. Each sequence's decode state (the bytes of a character begun and not
yet ended, whether its leading space is still to drop) lives on the agent, so the server's CPU only
copies strings; one round trip steps every sequence of a generation step.

The host equivalent is ``Tokenizer.decode_stream()``: the same text, step for step. The client is
C++ (``outboard/detokenize_client.h``); this is its Python face."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import _core
from .errors import Error, from_code


class Detokenizer:
    """One vocabulary on an agent's ``detokenize`` service. Made by ``Client.detokenizer(name)``; ``name``
    as for ``Client.tokenizer``: a name the agent resolves in its vocabulary directory, or a path of this
    machine's (a ``Path``, or a name with a "/"), whose bytes the agent is sent. One thread at a time."""

    def __init__(self, conn: _core.Connection, name: str | Path, *, timeout: float) -> None:
        self._timeout = timeout
        # A Path is a file of this machine whatever its form: absolute, it holds the "/" that says so.
        self._remote = _core.RemoteDetokenizer.open(conn, str(name.absolute()) if isinstance(name, Path) else name,
                                                    timeout)
        self.vocab_size = self._remote.vocab_size

    def stream(self) -> int:
        """A new sequence's stream: a handle for ``step``. Closed by a finishing step or ``close``."""
        return self._remote.open_stream(self._timeout)

    def close(self, stream: int) -> None:
        """Closes a stream without its held bytes (an abandoned sequence)."""
        self._remote.close_stream(stream, self._timeout)

    def step(self, steps: Sequence[tuple[int, Sequence[int] | np.ndarray]], *,
             finish: Sequence[bool] | bool = False) -> list[str | Error]:
        """For each ``(stream, ids)``, the text those ids complete; with ``finish`` (one flag, or one per
        step) also what the stream held back (U+FFFD for a broken character), and the stream is closed.
        A step that fails (an unknown id or stream) is its error, in its place, and leaves its stream as
        it was; the others go on. An int32 array of ids is sent without a copy into Python objects."""
        flags = [finish] * len(steps) if isinstance(finish, bool) else list(finish)
        return [t if isinstance(t, str) else from_code(*t) for t in self._remote.step(steps, flags, self._timeout)]
