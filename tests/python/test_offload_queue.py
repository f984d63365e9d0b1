"""BatchQueue: a serving loop puts batches and polls them finished, no thread woken per batch."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from offload_support import kill_soon, seconds_of_work, sample_texts, doomed_agent, local, model  # noqa: F401 (fixtures)

import outboard
from outboard import errors
from outboard.offload import AutoPolicy


def _drain(queue: outboard.BatchQueue, timeout: float = 30) -> dict[int, outboard.Batch | BaseException]:
    out: dict[int, outboard.Batch | BaseException] = {}
    deadline = time.monotonic() + timeout
    while queue.pending and time.monotonic() < deadline:
        for ticket, result in queue.poll(0.05):
            assert ticket not in out  # each batch is returned once
            out[ticket] = result
    return out


def _one(queue: outboard.BatchQueue, texts: list[str]) -> outboard.Batch | BaseException:
    ticket = queue.put(texts)
    return _drain(queue)[ticket]


@pytest.mark.parametrize("placement", ["agent", "host", "auto"])
def test_queued_batches_give_the_in_process_ids_and_per_text_errors_in_every_placement(
        start_agent, local: outboard.Tokenizer, model: str, placement: str) -> None:
    agent = start_agent("--recv-window-msgs", "4")  # more batches out than its window: put() waits for credit
    with outboard.connect(agent.address) as c:
        tok = c.tokenizer(model, placement=placement)
        queue = tok.queue()
        texts = sample_texts()
        tickets = {queue.put([t, b"\xff"]): t for t in texts}
        assert len(tickets) == len(texts) and queue.pending <= len(texts)
        finished = _drain(queue)
        assert sorted(finished) == sorted(tickets) and queue.pending == 0 and queue.poll() == []
        for ticket, text in tickets.items():
            batch = finished[ticket]
            assert isinstance(batch, outboard.Batch), batch
            assert np.array_equal(batch[0], local.encode(text)) and isinstance(batch.errors[1], errors.InvalidArgument)
        assert {b.placement for b in finished.values()} <= ({placement} if placement != "auto" else {"host", "agent"})
        if placement == "auto":
            assert tok.policy._in_flight == {"host": 0, "agent": 0}
        assert tok._collector is None  # the polls finished the agent's batches: no thread was started
        tok.close()


def test_a_queue_poll_waits_at_most_its_timeout_and_a_batch_at_most_its_deadline(
        doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    queue = c.tokenizer("gpt2", timeout=1.0).queue()
    start = time.monotonic()
    assert queue.poll(5.0) == []  # nothing out: nothing to wait for
    assert time.monotonic() - start < 0.5
    batch = _one(queue, ["before"])
    assert isinstance(batch, outboard.Batch) and batch.ok
    session = c.stats()["pid"]  # the agent's process that serves this client
    os.kill(session, signal.SIGSTOP)
    try:
        start = time.monotonic()
        ticket = queue.put(["frozen agent"])
        assert queue.poll(0.2) == [] and queue.pending == 1
        assert 0.2 <= time.monotonic() - start < 0.2 + 0.5
        [(got, failed)] = _drain(queue).items()
        assert got == ticket and isinstance(failed, errors.TimedOut)
        assert 1.0 <= time.monotonic() - start < 1.0 + 1.0
    finally:
        os.kill(session, signal.SIGCONT)


def test_agent_killed_mid_batch_fails_queued_batches_within_a_second(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    queue = c.tokenizer("gpt2", timeout=30).queue()
    tickets = [queue.put(seconds_of_work()) for _ in range(2)]
    kill_soon(doomed_agent, 0.3)
    start = time.monotonic()
    finished = _drain(queue)
    assert time.monotonic() - start < 0.3 + 1.0
    assert sorted(finished) == tickets
    assert all(isinstance(r, (errors.ConnectionReset, errors.NotConnected)) for r in finished.values()), finished
    # Refused on a dead connection: the error comes back from poll(), not put().
    assert isinstance(_one(queue, ["after"]), (errors.ConnectionReset, errors.NotConnected))


def test_auto_redoes_queued_batches_on_the_host_when_the_agent_dies(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", placement="auto", timeout=30, policy=AutoPolicy(slack=1e9))  # the agent if alive
    queue = tok.queue()
    seen = [_one(queue, ["warm up"]).placement for _ in range(2)]  # explores each placement once
    os.kill(doomed_agent.pid, signal.SIGKILL)
    doomed_agent.process.wait(10)
    text = "word " * 100_000
    batch = _one(queue, [text])
    assert isinstance(batch, outboard.Batch) and np.array_equal(batch[0], outboard.Tokenizer.gpt2().encode(text))
    assert seen + [batch.placement] == ["agent", "host", "host"]  # sent there, redone here
    assert tok.policy.routed == {"agent": 2, "host": 2}
    tok.close()
