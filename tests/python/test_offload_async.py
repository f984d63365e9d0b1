"""asyncio: encode_batch_async() finishes agent batches on the loop itself, against real agents."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import numpy as np
import pytest
from offload_support import kill_soon, seconds_of_work, sample_texts, doomed_agent, local, model  # noqa: F401 (fixtures)

import outboard
from outboard import errors
from outboard.offload import AutoPolicy
from outboard.offload.aio import LoopCompletions


def _loop_completions(loop: asyncio.AbstractEventLoop) -> list[LoopCompletions]:
    return list(LoopCompletions._of.get(loop, {}).values())


@pytest.mark.parametrize("placement", ["agent", "host", "auto"])
def test_async_batches_give_the_in_process_ids_in_every_placement(client: outboard.Client, local: outboard.Tokenizer,
                                                                  model: str, placement: str) -> None:
    tok = client.tokenizer(model, placement=placement)
    texts = sample_texts()

    async def main() -> list[outboard.offload.Batch]:
        return await asyncio.gather(*(tok.encode_batch_async([t, b"\xff"]) for t in texts))

    for t, b in zip(texts, asyncio.run(main())):
        assert np.array_equal(b[0], local.encode(t))
        assert isinstance(b.errors[1], errors.InvalidArgument)
        assert b.placement in ({"host", "agent"} if placement == "auto" else {placement})
    tok.close()


def test_async_batches_wait_for_credit_without_blocking_the_loop(start_agent, local: outboard.Tokenizer,
                                                                 model: str) -> None:
    agent = start_agent("--recv-window-msgs", "2")
    with outboard.connect(agent.address) as c:
        tok = c.tokenizer(model)
        texts = sample_texts()

        async def main() -> tuple[list[outboard.offload.Batch], int]:
            batches = await asyncio.gather(*(tok.encode_batch_async([t]) for t in texts))  # far more than 2
            return batches, sum(r.waits_for_credit for r in _loop_completions(asyncio.get_running_loop()))

        batches, waits = asyncio.run(main())
        assert waits > 0  # submits found the window full and awaited credit instead of blocking
        # One batch at a time tries again, not every waiting one at every answer (that was quadratic).
        assert waits <= 3 * len(texts), waits
        for t, b in zip(texts, batches):
            assert np.array_equal(b[0], local.encode(t))
        tok.close()


def test_async_and_threaded_batches_of_several_tokenizers_share_the_loop(client: outboard.Client) -> None:
    # One event fd serves every connection of the process: one watcher per loop, and batches that
    # another thread's progress finishes wake it.
    gpt2, bert = client.tokenizer("gpt2"), client.tokenizer("bert-base-uncased")
    local = {"gpt2": outboard.Tokenizer.gpt2(), "bert": outboard.Tokenizer.bert_base_uncased()}
    texts = sample_texts()
    threaded: list[bool] = []

    def waiter() -> None:
        threaded.extend(np.array_equal(gpt2.encode_batch([t])[0], local["gpt2"].encode(t)) for t in texts)

    async def main() -> list[bool]:
        thread = threading.Thread(target=waiter)
        thread.start()
        ok = []
        for _ in range(3):
            g = [gpt2.encode_batch_async([t]) for t in texts]
            b = [bert.encode_batch_async([t]) for t in texts]
            got = await asyncio.gather(*g, *b)
            ok += [np.array_equal(x[0], local["gpt2"].encode(t)) for x, t in zip(got, texts)]
            ok += [np.array_equal(x[0], local["bert"].encode(t)) for x, t in zip(got[len(texts):], texts)]
            assert len(_loop_completions(asyncio.get_running_loop())) == 1
        await asyncio.to_thread(thread.join)
        return ok

    assert all(asyncio.run(main())) and all(threaded) and len(threaded) == len(texts)
    gpt2.close()
    bert.close()


@pytest.mark.parametrize("placement", ["agent", "auto"])
def test_a_cancelled_async_batch_leaves_the_others_alone(client: outboard.Client, placement: str) -> None:
    tok = client.tokenizer("gpt2", placement=placement, policy=AutoPolicy(slack=1e9))  # auto: the agent
    local = outboard.Tokenizer.gpt2()
    texts = sample_texts()

    async def main() -> list[outboard.offload.Batch]:
        doomed = asyncio.ensure_future(tok.encode_batch_async(["word " * 200_000]))
        rest = [asyncio.ensure_future(tok.encode_batch_async([t])) for t in texts]
        await asyncio.sleep(0)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        batches = await asyncio.gather(*rest)
        await asyncio.sleep(0.3)  # the cancelled batch's answer arrives and is dropped
        assert all(not len(r.inflight) for r in _loop_completions(asyncio.get_running_loop()))
        return batches

    for t, b in zip(texts, asyncio.run(main())):
        assert np.array_equal(b[0], local.encode(t))
    if placement == "auto":  # the cancelled batch counts as ended: no phantom queue at the agent
        assert tok.policy._in_flight == {"host": 0, "agent": 0}
    tok.close()


def test_an_async_batch_times_out_at_its_deadline_while_the_agent_is_stopped(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", timeout=0.5)
    session = c.stats()["pid"]  # the agent's process that serves this client
    os.kill(session, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(errors.TimedOut):
            asyncio.run(tok.encode_batch_async(["frozen agent"]))
        assert 0.5 <= time.monotonic() - start < 0.5 + 1.0
    finally:
        os.kill(session, signal.SIGCONT)


def test_agent_killed_mid_batch_fails_async_batches_within_a_second(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", timeout=30)

    async def main() -> list[BaseException | outboard.offload.Batch]:
        pending = [tok.encode_batch_async(seconds_of_work()) for _ in range(2)]
        kill_soon(doomed_agent, 0.3)
        return await asyncio.gather(*pending, return_exceptions=True)

    start = time.monotonic()
    outcomes = asyncio.run(main())
    assert time.monotonic() - start < 0.3 + 1.0
    assert all(isinstance(o, (errors.ConnectionReset, errors.NotConnected)) for o in outcomes), outcomes


def test_auto_redoes_async_batches_on_the_host_when_the_agent_dies(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", placement="auto", timeout=30, policy=AutoPolicy(slack=1e9))  # the agent if alive
    text = "word " * 100_000

    async def main() -> list[str]:
        seen = [(await tok.encode_batch_async(["warm up"])).placement for _ in range(2)]  # explores each once
        os.kill(doomed_agent.pid, signal.SIGKILL)
        await asyncio.to_thread(doomed_agent.process.wait, 10)
        batch = await tok.encode_batch_async([text])
        assert np.array_equal(batch[0], outboard.Tokenizer.gpt2().encode(text))
        return seen + [batch.placement, (await tok.encode_batch_async(["next"])).placement]

    assert asyncio.run(main()) == ["agent", "host", "host", "host"]  # sent there, redone here; then presumed down
    assert tok.policy.routed == {"agent": 2, "host": 3}
    tok.close()
