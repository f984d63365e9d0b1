"""Agent batches in flight on one connection: the one completion mechanism under every way of
waiting for them."""

from __future__ import annotations

import threading

from .. import _core
from ..errors import Again, Error
from .batch import Finish, Options, Outcome, Text, agent_answer


class InFlight:
    """Batches sent to the agent and not yet answered, over one native ``_core.Completions``.

    A blocking call, submit()'s futures, an event loop and a BatchQueue are each a view of one of
    these: a batch is expected with a sink, sent, and whoever takes the answers (collect(), which
    waits driving the connection, or take() after progressing it oneself) hands each to its sink on
    the taking thread. One thread takes the answers of an InFlight (a second would not be woken by
    the first's): each view owns its own. Thread mode: multi for expect, send and drop."""

    def __init__(self, connection: _core.Connection) -> None:
        self.connection = connection
        self._native = _core.Completions(connection)
        self._lock = threading.Lock()
        self._sinks: dict[int, Finish] = {}
        self._next_token = 0

    def __len__(self) -> int:
        """Batches expected and not yet answered."""
        return len(self._sinks)

    def expect(self, sink: Finish) -> int:
        """A token to send a batch under, whose answer will go to ``sink``."""
        with self._lock:
            token, self._next_token = self._next_token, self._next_token + 1
            self._sinks[token] = sink
        return token

    def send(self, token: int, remote: _core.RemoteTokenizer, texts: list[Text], options: Options,
             timeout: float, *, wait_credit: bool = True) -> None:
        """Sends the batch expected under ``token``; ``timeout`` bounds it until its answer. A refusal
        goes to its sink at once, but for Again (without ``wait_credit``: the agent's window is full,
        nothing was sent), which is raised with the batch still expected, to be sent again."""
        try:
            remote.submit(self._native, token, texts, **options.keywords(), timeout=timeout, wait_credit=wait_credit)
        except Again:
            raise
        except Exception as e:  # refused (a lost connection, a bad text): nothing was sent
            self._hand_out([(token, e)])
        except BaseException:
            self.drop(token)
            raise

    def drop(self, token: int) -> bool:
        """Forgets a batch whose caller gave up: its answer goes nowhere. False if it was answered."""
        with self._lock:
            return self._sinks.pop(token, None) is not None

    def collect(self, timeout: float) -> int:
        """Hands out the answers that came in, waiting up to ``timeout`` s (driving the connection) for
        one; how many."""
        return self._hand_out([(token, agent_answer(ok, result)) for token, ok, result in self._native.collect(timeout)])

    def take(self) -> int:
        """collect() for whoever progressed the connection itself: what is ready, never waiting."""
        return self._hand_out([(token, agent_answer(ok, result)) for token, ok, result in self._native.take()])

    def fail_all(self, error: Error) -> None:
        """Every batch expected fails with ``error`` (nothing would ever answer them)."""
        with self._lock:
            tokens = list(self._sinks)
        self._hand_out([(token, error) for token in tokens])

    def _hand_out(self, answers: list[tuple[int, Outcome]]) -> int:
        handed = 0
        for token, answer in answers:
            with self._lock:
                sink = self._sinks.pop(token, None)
            if sink is not None:  # None: its caller gave up on it
                sink(answer)
                handed += 1
        return handed
