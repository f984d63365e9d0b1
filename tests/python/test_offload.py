"""Tokenization offload against real agent processes: exact ids in every placement, per-text
errors, zero-copy results, concurrency, and failures of either side (blocking calls and submit()'s
futures; asyncio and BatchQueue in test_offload_async.py and test_offload_queue.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from offload_support import kill_soon, seconds_of_work, sample_texts, doomed_agent, local, model  # noqa: F401 (fixtures)

import outboard
from outboard import errors
from outboard.offload import MAX_TEXT_BYTES, AutoPolicy


@pytest.mark.parametrize("placement", ["agent", "host", "auto"])
def test_every_placement_gives_the_in_process_ids(client: outboard.Client, model: str,
                                                  local: outboard.Tokenizer, placement: str) -> None:
    tok = client.tokenizer(model, placement=placement)
    texts = sample_texts()
    for start in range(0, len(texts), 16):  # batches of distinct texts
        part = texts[start:start + 16]
        batch = tok.encode_batch(part)
        assert batch.ok and len(batch) == len(part)
        for i, text in enumerate(part):
            assert np.array_equal(batch[i], local.encode(text)), (placement, start + i)
    if placement == "auto":
        assert sum(tok.policy.routed.values()) == (len(texts) + 15) // 16


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "tekken", "mistral-v1", "mistral-v3"])
def test_the_agent_serves_each_bpe_family_by_name_and_uploaded(client: outboard.Client, name: str) -> None:
    """The format follows the vocabulary's name: the agent's own file, and the client's uploaded as
    bytes (format by file name), give the host's ids."""
    from outboard import vocab

    local = outboard.offload.open_local(name)
    texts = sample_texts()
    for source in (name, vocab.path(name)):
        tok = client.tokenizer(source)
        batch = tok.encode_batch(texts)
        assert batch.ok and tok.vocab_size == local.vocab_size
        assert all(np.array_equal(batch[i], local.encode(t)) for i, t in enumerate(texts)), source


def test_agent_ids_view_the_registered_buffer_and_survive_later_batches(client: outboard.Client,
                                                                        local: outboard.Tokenizer,
                                                                        model: str) -> None:
    tok = client.tokenizer(model)
    texts = sample_texts()
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
    texts = [t for t in sample_texts() if len(t.encode()) < 4000][:6]  # a slot per byte is reserved
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
        texts = sample_texts()
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


def test_a_batch_that_succeeded_builds_its_errors_and_timing_only_when_read(client: outboard.Client) -> None:
    for placement in ("agent", "host"):
        batch = client.tokenizer("gpt2", placement=placement).encode_batch(["hello world", "café", ""])
        assert batch._errors is None and batch._agent is None  # nothing built on the way
        assert batch.ok and len(batch) == 3
        assert batch.errors == [None, None, None]
        timing = batch.agent
        assert (timing["tokenize_ns"] > 0) if placement == "agent" else timing == {}
        assert f"3 texts, {len(batch.ids)} ids, {placement}" in repr(batch)
    # The arrays hold the agent's batch (and its slots) by themselves.
    batch = client.tokenizer("gpt2").encode_batch(["the ids outlive the batch object"])
    ids, offsets, expected = batch.ids, batch.offsets, batch.ids.copy()
    del batch
    import gc
    gc.collect()
    assert np.array_equal(ids, expected) and offsets.tolist() == [0, len(expected)]


def test_the_cpu_of_agent_batches_splits_into_submit_wait_and_completion(client: outboard.Client) -> None:
    from outboard.offload import measure_cpu

    tok = client.tokenizer("gpt2")
    texts = [f"request {i}: " + "some words to tokenize " * 40 for i in range(20)]
    with measure_cpu() as split:
        for f in [tok.submit([t]) for t in texts]:
            assert f.result().ok
    assert split.submit_ns > 0 and split.wait_ns > 0 and split.completion_ns > 0
    before = (split.submit_ns, split.wait_ns, split.completion_ns)
    tok.encode_batch(texts[:1])  # outside the block: not counted
    assert (split.submit_ns, split.wait_ns, split.completion_ns) == before


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
        big = (" ".join(sample_texts()) * 200)[: 10 << 20]
        batch = c.tokenizer(model).encode_batch([big, "x" * ((12 << 20) + 1), "tail"])
        assert np.array_equal(batch[0], local.encode(big))
        assert isinstance(batch.errors[1], errors.TooBig) and "exceeds max_text_bytes 12582912" in str(batch.errors[1])
        assert np.array_equal(batch[2], local.encode("tail"))
    assert MAX_TEXT_BYTES == 16 << 20  # the host placement's limit matches the agent's default


def test_threads_and_futures_share_one_tokenizer(client: outboard.Client, local: outboard.Tokenizer,
                                                 model: str) -> None:
    tok = client.tokenizer(model)
    texts = sample_texts()
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
    texts = sample_texts()
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
        texts = sample_texts()
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
        texts = sample_texts()
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


def test_agent_killed_mid_batch_fails_the_caller_within_a_second(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", timeout=30)
    big = seconds_of_work()
    kill_soon(doomed_agent, 0.3)
    start = time.monotonic()
    with pytest.raises((errors.ConnectionReset, errors.NotConnected)):
        tok.encode_batch(big)
    assert time.monotonic() - start < 0.3 + 1.0


def test_agent_killed_mid_batch_fails_submitted_futures_within_a_second(doomed_agent: outboard.LocalAgent) -> None:
    c = outboard.connect(doomed_agent.address)
    tok = c.tokenizer("gpt2", timeout=30)
    futures = [tok.submit(seconds_of_work()) for _ in range(2)]
    kill_soon(doomed_agent, 0.3)
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
    kill_soon(doomed_agent, 0.1)
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


def test_a_tokenizer_takes_a_connection_and_what_the_agent_announced(start_agent) -> None:
    agent = start_agent("--tokenize-threads", "2")
    with outboard.connect(agent.address) as c:
        assert c.connection.agent_info["tokenize_threads"] == 2  # from the welcome: no round trip
        tok = outboard.OffloadTokenizer(c.connection, "gpt2", placement="auto")
        assert tok.policy.agent_workers == 2
        assert tok.encode_batch(["hello"])[0].tolist() == [31373]
        tok.close()
    host = outboard.OffloadTokenizer(None, "gpt2", placement="host")
    assert host.encode_batch(["hello"]).placement == "host"
    with pytest.raises(errors.InvalidArgument, match="needs a connection"):
        outboard.OffloadTokenizer(None, "gpt2", placement="agent")
