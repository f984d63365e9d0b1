"""Task graphs in DOCA Graph's model: build a graph once, freeze it, run many instances of it at
once. Engine nodes (``"sha256"``, ``"dma"``) run natively; Python bodies are the convenient slow
path (each call takes the GIL).

    g = Graph("seed")
    sha, dma = g.add_engine("sha", "sha256"), g.add_engine("dma", "dma")
    check = g.add_user("check", lambda data: verify(data))
    g.add_dependency(sha, check); g.add_dependency(dma, check); g.freeze()
    with Executor(threads=2) as ex:
        inst = g.instance()
        inst.set_sha256(sha, src, digest); inst.set_copy(dma, src, dst); inst.set_data(check, ctx)
        ex.submit(inst); ex.wait(inst)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import _core, errors


class Graph:
    """A DAG of nodes; immutable after :meth:`freeze`, then shared by all its instances."""

    def __init__(self, name: str = "graph") -> None:
        self._g = _core.Graph.create(name)
        self._owned: list[Any] = []  # bodies and sub-graphs: the runtime only borrows them

    def add_user(self, name: str, body: Callable[[Any], None]) -> int:
        """A node running ``body(data)`` with the data its instance set (or None). An exception
        fails the instance (``errors.Failed`` naming the node)."""
        node = self._g.add_user(name, body)
        self._owned.append(body)
        return node

    def add_engine(self, name: str, engine: str) -> int:
        """A node running a built-in engine: ``"sha256"`` or ``"dma"`` (a copy)."""
        return self._g.add_engine(name, engine)

    def add_subgraph(self, name: str, sub: Graph) -> int:
        node = self._g.add_subgraph(name, sub._g)
        self._owned.append(sub)
        return node

    def add_dependency(self, before: int, after: int) -> None:
        """``after`` starts when ``before`` finished. An edge closing a cycle raises
        ``errors.InvalidArgument`` naming both nodes."""
        self._g.add_dependency(before, after)

    def freeze(self) -> None:
        self._g.freeze()

    def instance(self) -> Instance:
        """A new instance (the graph must be frozen)."""
        return Instance(self, _core.Instance.create(self._g))

    @property
    def frozen(self) -> bool:
        return self._g.frozen

    @property
    def name(self) -> str:
        return self._g.name

    @property
    def edges(self) -> int:
        return self._g.edges

    @property
    def instance_state_bytes(self) -> int:
        """Run state per instance (join counters, flags): not a copy of the graph."""
        return self._g.instance_state_bytes

    def __len__(self) -> int:
        return len(self._g)


class Instance:
    """One run's state of a frozen graph; reusable once it completed."""

    def __init__(self, graph: Graph, core: Any) -> None:
        self._graph = graph  # keeps the Python bodies alive while this instance can run them
        self._i = core
        self._data: dict[int, Any] = {}  # what the runtime borrows, by node
        self._executor: Executor | None = None

    def __del__(self) -> None:
        # The runtime borrows this instance's bodies and data: its run ends first.
        if self._executor is not None and self._executor._e is not None and self._i.in_flight:
            try:
                self._executor._e.wait(self._i, float("inf"))
            except errors.Error:
                pass  # the run ended with an error, which nobody is left to read

    def set_data(self, node: int, data: Any) -> None:
        """What a Python node's body receives."""
        self._i.set_data(node, data)
        self._data[node] = data

    def set_sha256(self, node: int, src: np.ndarray, digest: np.ndarray) -> None:
        """SHA-256 of ``src`` (uint8) into ``digest`` (uint8, 32 bytes), both kept alive here."""
        self._i.set_sha256(node, src, digest)
        self._data[node] = (src, digest)

    def set_copy(self, node: int, src: np.ndarray, dst: np.ndarray) -> None:
        self._i.set_copy(node, src, dst)
        self._data[node] = (src, dst)

    def enable_timing(self, on: bool = True) -> None:
        self._i.enable_timing(on)

    def timing(self) -> np.ndarray:
        """(nodes, 2) uint64: start and end of each node in the last run, monotonic ns."""
        return self._i.timing()

    @property
    def in_flight(self) -> bool:
        return self._i.in_flight


class Executor:
    """Runs instances on ``threads`` workers (0: inside :meth:`progress`/:meth:`wait` calls).
    ``spin_us``: how long an idle worker polls before it sleeps (None: the library's default)."""

    def __init__(self, threads: int = 0, *, engine_threads: int = 0, max_in_flight: int = 1 << 20,
                 spin_us: int | None = None, completion: str = "inline", callers_execute: bool = True) -> None:
        self._e = _core.Executor.create(threads, engine_threads, max_in_flight, spin_us, completion,
                                        callers_execute)

    def submit(self, instance: Instance) -> None:
        """Starts a run; ``errors.BadState`` if it is in flight, ``errors.Again`` at max_in_flight."""
        self._e.submit(instance._i)
        instance._executor = self  # outlives the run: the instance waits for it when dropped

    def wait(self, instance: Instance, timeout: float = 60.0) -> None:
        """Waits for the run; raises its error, or ``errors.TimedOut`` (the run goes on)."""
        self._e.wait(instance._i, timeout)

    def progress(self) -> int:
        return self._e.progress()

    def drain(self, timeout: float = 60.0) -> None:
        self._e.drain(timeout)

    def event_fd(self) -> int:
        """Readable while queued completions wait for :meth:`progress` (completion="queued")."""
        return self._e.event_fd()

    @property
    def in_flight(self) -> int:
        return self._e.in_flight

    def close(self) -> None:
        """Waits for instances in flight, then stops the workers."""
        self._e = None

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Executor", "Graph", "Instance"]
