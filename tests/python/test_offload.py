"""Tokenization offload against real agent processes: exact ids in every placement, per-text
errors, zero-copy results, concurrency, and failures of either side."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

import outboard
from outboard import errors
from outboard.offload import MAX_TEXT_BYTES, AutoPolicy, _LoopCompletions


def _texts() -> list[str]:
    from pydoc_data.topics import topics

    docs = [t for t in topics.values() if t][:60]
    docs += ["", " ", "naïve café — Ελληνικά, русский, 日本語のテキスト 🙂🙂", "a\tb\r\nc  d\n\n", "x" * 3000]
    return docs


@pytest.fixture(params=["gpt2", "bert-base-uncased"])
def model(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def local(model: str) -> outboard.Tokenizer:
    return outboard.offload.open_local(model)


@pytest.mark.parametrize("placement", ["agent", "host", "auto"])
def test_every_placement_gives_the_in_process_ids(client: outboard.Client, model: str,
                                                  local: outboard.Tokenizer, placement: str) -> None:
    tok = client.tokenizer(model, placement=placement)
    texts = _texts()
    for start in range(0, len(texts), 16):  # batches of distinct texts
        part = texts[start:start + 16]
        batch = tok.encode_batch(part)
        assert batch.ok and len(batch) == len(part)
        for i, text in enumerate(part):
            assert np.array_equal(batch[i], local.encode(text)), (placement, start + i)
    if placement == "auto":
        assert sum(tok.policy.routed.values()) == (len(texts) + 15) // 16


def test_agent_ids_view_the_registered_buffer_and_survive_later_batches(client: outboard.Client,
                                                                        local: outboard.Tokenizer,
                                                                        model: str) -> None:
    tok = client.tokenizer(model)
    texts = _texts()
    first = tok.encode_batch(texts[:8])
    kept = first.ids.copy()
    assert first.ids.base is not None and not first.ids.flags.writeable and first.ids.dtype == np.int32
    for i in range(50):  # slots of live batches are never handed out again
        tok.encode_batch(texts[i % len(texts):][:4])
    assert np.array_equal(first.ids, kept)
    assert first.agent["tokenize_ns"] > 0 and first.agent["cpu_ns"] > 0


def test_agent_ids_land_in_the_callers_array_which_is_held_while_a_batch_views_it(client: outboard.Client,
                                                                                local: outboard.Tokenizer,
                                                                                model: str) -> None:
    import gc
    import weakref

    class Pinned(np.ndarray):  # a subclass, so that a weak reference tells when the array is freed
        pass

    output = np.full(1 << 15, -1, np.int32).view(Pinned)
    freed = weakref.ref(output)
    tok = client.tokenizer(model, output=output)
    base = output.ctypes.data
    texts = [t for t in _texts() if len(t.encode()) < 4000][:6]  # a slot per byte is reserved
    batch = tok.encode_batch(texts)
    assert base <= batch.ids.ctypes.data and batch.ids.ctypes.data + batch.ids.nbytes <= base + output.nbytes
    for i, text in enumerate(texts):
        assert np.array_equal(batch[i], local.encode(text)), i
    start = (batch.ids.ctypes.data - base) // 4
    assert np.array_equal(output[start:start + len(batch.ids)], batch.ids)  # the caller's own memory
    big = tok.encode_batch(["x y " * 10000])  # 40000 bytes do not fit: the tokenizer's own memory
    assert not base <= big.ids.ctypes.data < base + output.nbytes
    assert np.array_equal(big[0], local.encode("x y " * 10000))

    del output, big
    tok.close()
    del tok
    gc.collect()
    assert freed() is not None, "a batch still views the array"
    ids = batch.ids.copy()
    del batch
    gc.collect()
    assert freed() is None
    assert len(ids) > 0

    for bad, why in ((np.zeros(8, np.int64), "dtype int64"), (np.zeros((2, 4), np.int32), "2 dimensions"),
                     (np.zeros(16, np.int32)[::2], "not C-contiguous"), (np.zeros(0, np.int32), "empty"),
                     ([0] * 8, "numpy array")):
        with pytest.raises(errors.InvalidArgument, match=why):
            client.tokenizer(model, output=bad)


def test_an_agent_tokenizing_on_its_polling_progress_thread_gives_the_same_ids(start_agent, model: str,
                                                                              local: outboard.Tokenizer) -> None:
    # The bench's agent on one core: no workers, the progress thread tokenizes and polls.
    agent = start_agent("--tokenize-threads", "0", "--spin-us", "1000000")
    with outboard.connect(agent.address, spin_us=0) as client:
        tok = client.tokenizer(model)
        texts = _texts()
        futures = [tok.submit(texts[i:i + 8]) for i in range(0, len(texts), 8)]  # several in flight
        for start, future in zip(range(0, len(texts), 8), futures):
            batch = future.result(timeout=30)
            for i, text in enumerate(texts[start:start + 8]):
                assert np.array_equal(batch[i], local.encode(text)), start + i
        with pytest.raises(errors.InvalidArgument, match="text 0"):
            tok.encode_batch([b"\xff"])[0]
        tok.close()


def test_a_failing_text_fails_alone_with_the_same_error_in_every_placement(client: outboard.Client) -> None:
    texts: list[str | bytes] = ["hello world", b"caf\xc3 latte", "", "<|endoftext|> here", "one two three four five",
                                "last one"]
    seen = {}
    for placement in ("agent", "host"):
        batch = client.tokenizer("gpt2", placement=placement).encode_batch(texts, max_len=4)
        kinds = [type(e) if e else None for e in batch.errors]
        assert kinds == [None, errors.InvalidArgument, None, errors.InvalidArgument, errors.TooBig, None]
        assert "text 1: invalid UTF-8 at byte offset 3" in str(batch.errors[1])
        assert "special token '<|endoftext|>'" in str(batch.errors[3])
        assert "text 4 has 5 ids, over max_len 4" in str(batch.errors[4])
        with pytest.raises(errors.TooBig):
            batch[4]
        assert len(batch[2]) == 0
        seen[placement] = ([str(e) for e in batch.errors], batch.ids.tolist(), batch.offsets.tolist())
    assert seen["agent"] == seen["host"]
    # Allowed specials and the replace policy behave as in process.
    tok = client.tokenizer("gpt2")
    batch = tok.encode_batch(texts[:4], allowed_special="all", utf8="replace")
    assert batch.ok and batch[3][0] == 50256


def test_too_small_an_output_buffer_names_the_sizes(client: outboard.Client) -> None:
    for placement in ("agent", "host"):
        batch = client.tokenizer("gpt2", placement=placement).encode_batch(
            ["hello world", "one two three four", "end"], capacity=3)
        assert batch.errors[0] is None and batch.errors[2] is None
        assert isinstance(batch.errors[1], errors.TooBig)
        assert "output buffer too small: text 1 needs 4 ids at id 2 but the buffer holds 3 ids" in str(batch.errors[1])


def test_ten_megabyte_texts_and_the_length_limit(start_agent, local: outboard.Tokenizer, model: str) -> None:
    agent = start_agent("--max-text-bytes", str(12 << 20))
    with outboard.connect(agent.address) as c:
        big = (" ".join(_texts()) * 200)[: 10 << 20]
        batch = c.tokenizer(model).encode_batch([big, "x" * ((12 << 20) + 1), "tail"])
        assert np.array_equal(batch[0], local.encode(big))
        assert isinstance(batch.errors[1], errors.TooBig) and "exceeds max_text_bytes 12582912" in str(batch.errors[1])
        assert np.array_equal(batch[2], local.encode("tail"))
    assert MAX_TEXT_BYTES == 16 << 20  # the host placement's limit matches the agent's default


def test_threads_and_futures_share_one_tokenizer(client: outboard.Client, local: outboard.Tokenizer,
                                                 model: str) -> None:
    tok = client.tokenizer(model)
    texts = _texts()
    bad: list[int] = []

    def work(k: int) -> None:
        for i in range(30):
            part = [texts[(k * 7 + i + j) % len(texts)] for j in range(3)]
            b = tok.encode_batch(part)
            if any(not np.array_equal(b[j], local.encode(t)) for j, t in enumerate(part)):
                bad.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    futures = [tok.submit([t]) for t in texts[:20]]
    for t, f in zip(texts[:20], futures):
        assert np.array_equal(f.result(timeout=10)[0], local.encode(t))
    tok.close()


def test_submitted_batches_finish_beside_callers_that_wait(client: outboard.Client, local: outboard.Tokenizer,
                                                           model: str) -> None:
    # Futures are finished by the collector, or by a waiting caller's progress (which wakes it).
    tok = client.tokenizer(model)
    texts = _texts()
    bad: list[tuple[str, int, int]] = []

    def submitter(k: int) -> None:
        futures = [(i, tok.submit([texts[(k * 5 + i) % len(texts)], b"\xff"])) for i in range(40)]
        for i, future in futures:
            b = future.result(timeout=30)
            if not (np.array_equal(b[0], local.encode(texts[(k * 5 + i) % len(texts)]))
                    and isinstance(b.errors[1], errors.InvalidArgument) and b.placement == "agent"):
                bad.append(("submit", k, i))

    def waiter(k: int) -> None:
        for i in range(40):
            text = texts[(k + 3 * i) % len(texts)]
            if not np.array_equal(tok.encode_batch([text])[0], local.encode(text)):
                bad.append(("wait", k, i))

    threads = [threading.Thread(target=submitter, args=(k,)) for k in range(3)]
    threads += [threading.Thread(target=waiter, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    tok.close()
    assert tok._collector is None  # close() waited for the collector


def test_auto_routes_each_submitted_batch_and_learns_the_agents_workers(start_agent, local: outboard.Tokenizer,
                                                                        model: str) -> None:
    agent = start_agent("--tokenize-threads", "3")
    with outboard.connect(agent.address) as c:
        tok = c.tokenizer(model, placement="auto")
        assert tok.policy.agent_workers == 3
        texts = _texts()
        futures = [tok.submit([t]) for t in texts]  # all at once: the agent's queue fills, some spill
        for t, f in zip(texts, futures):
            b = f.result(timeout=30)
            assert np.array_equal(b[0], local.encode(t)), b.placement
        assert sum(tok.policy.routed.values()) == len(texts) and tok.policy.routed["agent"] > 0
        assert {f.result().placement for f in futures} == {"host", "agent"}
        tok.close()


def test_auto_explores_each_placement_and_refreshes_one_not_heard_from_lately() -> None:
    policy = AutoPolicy(explore_after=0.2)

    def route(want: str, ns_per_byte: float) -> None:
        assert policy.choose(1000) == want
        policy.done(want, 1000, ns_per_byte * 1000 / 1e9)

    route("agent", 10_000)  # first batches explore: the agent measures slow
    route("host", 1_000)
    route("host", 1_000)  # the agent is clearly slower
    time.sleep(0.25)
    route("agent", 10)  # not heard from for 0.2 s: one batch, and it is fast now
    route("host", 1_000)  # the host's turn to be refreshed
    for _ in range(3):
        route("agent", 10)
    assert policy.routed == {"agent": 5, "host": 3}


def test_auto_charges_the_agents_queue_only_with_the_time_the_agent_works() -> None:
    # Agent: 300 ns/B of service, of which it reported 50 working; host: 250 ns/B; slack 1.5 (375).
    policy = AutoPolicy(slack=1.5, explore_after=60)
    policy._sample_cpu = lambda: None  # unit test: this process's own CPU use left out
    policy._cores = 1
    assert policy.choose(1000) == "agent"  # exploring each placement first
    policy.done("agent", 1000, 300e-6, work_s=50e-6)
    assert policy.choose(1000) == "host"
    policy.done("host", 1000, 250e-6)
    # With n batches out, the agent's estimate is 300 + 50 n: one out (350) still goes there, two
    # (400) spill. Charging the whole 300 per batch out would have spilled at the first.
    assert [policy.choose(1000) for _ in range(3)] == ["agent", "agent", "host"]


def test_auto_counts_a_batch_the_agent_refuses_as_done(start_agent) -> None:
    agent = start_agent("--max-batch-texts", "2")
    with outboard.connect(agent.address) as c:
        tok = c.tokenizer("gpt2", placement="auto")
        for _ in range(2):  # the first goes to the agent (exploring), the second after it failed too
            with pytest.raises(errors.Error, match="2"):
                tok.encode_batch(["a", "b", "c"])
            assert tok.policy._in_flight == {"host": 0, "agent": 0}
        with pytest.raises(errors.Error):
            tok.submit(["a", "b", "c"]).result(timeout=10)
        assert tok.policy._in_flight == {"host": 0, "agent": 0}
        tok.close()


def test_submit_waits_for_credit_when_more_batches_are_in_flight_than_the_agent_takes(
        start_agent, local: outboard.Tokenizer, model: str) -> None:
    agent = start_agent("--recv-window-msgs", "4")
    with outboard.connect(agent.address) as c:
        tok = c.tokenizer(model)
        texts = _texts()
        futures = [tok.submit([t]) for t in texts]  # far more than 4 at once
        for t, f in zip(texts, futures):
            assert np.array_equal(f.result(timeout=30)[0], local.encode(t))
        tok.close()


_DISCONNECTING_CLIENT = """
import os, sys, outboard
c = outboard.connect(sys.argv[1])
tok = c.tokenizer("gpt2")
fut = tok.submit(["word " * 2_000_000] * 4)
print("submitted", flush=True)
os._exit(0)  # gone mid-batch, connection never closed
"""


def test_a_client_leaving_mid_batch_harms_nobody(agent: outboard.LocalAgent, client: outboard.Client) -> None:
    p = subprocess.run([sys.executable, "-c", _DISCONNECTING_CLIENT, agent.address], capture_output=True, text=True,
                       timeout=60)
    assert "submitted" in p.stdout, p.stderr
    batch = client.tokenizer("gpt2").encode_batch(["still served"])
    assert batch.ok and batch[0].tolist() == outboard.Tokenizer.gpt2().encode("still served").tolist()
    assert agent.process.poll() is None


def _seconds_of_work() -> list[str]:
    """A batch the agent tokenizes for seconds: 16 texts of 3.6 MB without a repeated word (a
    repeated word is cheap: a 60 MB batch of one word ended within the 0.3 s these tests wait)."""
    distinct = " ".join(f"{i * 2654435761 % 2**32:x}" for i in range(400_000))
    return [distinct] * 16


@pytest.fixture
def doomed_agent() -> Iterator[outboard.LocalAgent]:
    agent = outboard.LocalAgent().start()
    yield agent
    agent.stop()


def _kill_soon(agent: outboard.LocalAgent, delay: float) -> threading.Timer:
    timer = threading.Timer(delay, lambda: os.kill(agent.pid, signal.SIGKILL))
    timer.start()
    return timer


def test_agent_killed_mid_batch_fails_the_caller_within_a_second(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", timeout=30)
    big = _seconds_of_work()
    _kill_soon(doomed_agent, 0.3)
    start = time.monotonic()
    with pytest.raises((errors.ConnectionReset, errors.NotConnected)):
        tok.encode_batch(big)
    assert time.monotonic() - start < 0.3 + 1.0


def test_agent_killed_mid_batch_fails_submitted_futures_within_a_second(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", timeout=30)
    futures = [tok.submit(_seconds_of_work()) for _ in range(2)]
    _kill_soon(doomed_agent, 0.3)
    start = time.monotonic()
    for future in futures:
        with pytest.raises((errors.ConnectionReset, errors.NotConnected)):
            future.result(timeout=10)
    assert time.monotonic() - start < 0.3 + 1.0


def test_auto_falls_back_to_the_host_when_the_agent_dies(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", placement="auto", timeout=30)
    first = tok.encode_batch(["warm up"])  # explores the agent first
    assert first.placement == "agent"
    text = "word " * 400_000
    _kill_soon(doomed_agent, 0.1)
    time.sleep(0.2)
    batch = tok.encode_batch([text])
    assert batch.placement == "host"
    assert np.array_equal(batch[0], outboard.Tokenizer.gpt2().encode(text))
    assert tok.encode_batch(["next"]).placement == "host"  # agent presumed down for a while


def test_auto_redoes_submitted_batches_on_the_host_when_the_agent_dies(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", placement="auto", timeout=30, policy=AutoPolicy(slack=1e9))  # the agent if alive
    assert tok.submit(["warm up"]).result(timeout=10).placement == "agent"  # explores each placement once
    assert tok.submit(["warm up"]).result(timeout=10).placement == "host"
    os.kill(doomed_agent.pid, signal.SIGKILL)
    doomed_agent.process.wait(10)
    text = "word " * 100_000
    batch = tok.submit([text]).result(timeout=30)
    assert batch.placement == "host" and tok.policy.routed == {"agent": 2, "host": 2}  # sent there, redone here
    assert np.array_equal(batch[0], outboard.Tokenizer.gpt2().encode(text))
    assert tok.submit(["next"]).result(timeout=10).placement == "host"  # agent presumed down for a while
    tok.close()


# ---- asyncio: encode_batch_async() finishes agent batches on the loop itself

def _loop_completions(loop: asyncio.AbstractEventLoop) -> list[_LoopCompletions]:
    return list(_LoopCompletions._of.get(loop, {}).values())


@pytest.mark.parametrize("placement", ["agent", "host", "auto"])
def test_async_batches_give_the_in_process_ids_in_every_placement(client: outboard.Client, local: outboard.Tokenizer,
                                                                  model: str, placement: str) -> None:
    tok = client.tokenizer(model, placement=placement)
    texts = _texts()

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
        texts = _texts()

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
    texts = _texts()
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
    texts = _texts()

    async def main() -> list[outboard.offload.Batch]:
        doomed = asyncio.ensure_future(tok.encode_batch_async(["word " * 200_000]))
        rest = [asyncio.ensure_future(tok.encode_batch_async([t])) for t in texts]
        await asyncio.sleep(0)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        batches = await asyncio.gather(*rest)
        await asyncio.sleep(0.3)  # the cancelled batch's answer arrives and is dropped
        assert all(not r.futures for r in _loop_completions(asyncio.get_running_loop()))
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
        pending = [tok.encode_batch_async(_seconds_of_work()) for _ in range(2)]
        _kill_soon(doomed_agent, 0.3)
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


# ---- BatchQueue: a serving loop puts batches and polls them finished, no thread woken per batch

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
        texts = _texts()
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
    tickets = [queue.put(_seconds_of_work()) for _ in range(2)]
    _kill_soon(doomed_agent, 0.3)
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
