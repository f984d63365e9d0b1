"""The tokenize bench's consumer: the embedding lookup on numpy, and on torch with CUDA where a GPU is
present (those tests skip elsewhere), fed from buffers the agent writes into."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import outboard
from outboard.bench import consumer
from outboard.bench.suites import tokenize_offload as bench

VOCAB = 1000


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not _cuda(), reason="needs torch with a CUDA device")


def _reference(e: consumer.Embedder, ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    rows = []
    for i in range(len(offsets) - 1):
        for pos, tid in enumerate(ids[offsets[i]:offsets[i + 1]]):
            rows.append(e.word[tid] + e.pos[pos % consumer.POSITIONS])
    return np.array(rows, np.float32).reshape(-1, consumer.DIM)


def _batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    lengths = [5, 0, 2100, 1]  # an empty text, and one longer than the position table
    ids = rng.integers(0, VOCAB, sum(lengths), dtype=np.int32)
    return ids, np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint64)


def test_payloads_are_distinct_windows_until_the_corpus_has_no_fresh_offset() -> None:
    import string

    pool = consumer.Payloads(string.ascii_letters)  # 52 distinct characters: 44 windows of 8
    windows = [pool.take(8) for _ in range(44)]
    assert len(set(windows)) == 44 and all(len(w) == 8 and w in string.ascii_letters for w in windows)
    assert len(pool.take(4)) == 4  # another size has offsets of its own
    with pytest.raises(outboard.errors.BadConfig, match="payloads of 8 B: all 44 offsets"):
        pool.take(8)


def test_numpy_lookup_adds_each_ids_position_in_its_own_text() -> None:
    e = consumer.Embedder(VOCAB)
    ids, offsets = _batch()
    out = e(e.to_device(ids, offsets))
    assert out.shape == (len(ids), consumer.DIM)
    np.testing.assert_allclose(out, _reference(e, ids, offsets), rtol=1e-6)


def test_an_unknown_embed_device_is_refused() -> None:
    with pytest.raises(ValueError, match="'tpu' is not one of"):
        consumer.make_embedder("tpu", VOCAB)
    if not _cuda():
        with pytest.raises(RuntimeError, match="needs torch with a CUDA device"):
            consumer.make_embedder("torch", VOCAB)


@needs_cuda
def test_torch_lookup_on_cuda_equals_numpy_on_the_same_tables() -> None:
    t = consumer.TorchEmbedder(VOCAB)
    n = consumer.Embedder(VOCAB)
    n.word, n.pos = t.word.cpu().numpy(), t.pos.cpu().numpy()
    ids, offsets = _batch()
    pinned = t.host_buffer(len(ids) + 10)
    pinned[10:] = ids
    staged = t.to_device(pinned[10:], offsets)
    assert staged[0].is_cuda and staged[0].tolist() == ids.tolist()
    np.testing.assert_allclose(t(staged).cpu().numpy(), n(n.to_device(ids, offsets)), rtol=1e-5, atol=1e-6)
    assert t.device.startswith("cuda (torch")
    long = np.random.default_rng(4).integers(0, VOCAB, 70000, dtype=np.int32)  # one text, past the position table
    one = np.array([0, len(long)], np.uint64)
    np.testing.assert_allclose(t(t.to_device(long, one)).cpu().numpy(), n(n.to_device(long, one)), rtol=1e-5,
                               atol=1e-6)


@needs_cuda
def test_agent_ids_land_in_pinned_memory_and_reach_the_gpu_unchanged(client: outboard.Client) -> None:
    t = consumer.TorchEmbedder(bench.GPT2_VOCAB)
    pipe = bench.Pipeline(client, "gpt2", t)
    texts = ["The quick brown fox jumps over the lazy dog. " * 20, "naïve café 🙂"]
    want = pipe.tok["host"].encode_batch(texts)
    for placement in bench.PLACEMENTS:
        r = pipe.request(placement, texts)
        assert np.array_equal(r["batch"].ids, want.ids), placement
        assert r["transfer"] > 0 and r["embed"] > 0
    batch = pipe.tok["agent"].encode_batch(texts)
    host = t._host_tensor(batch.ids)
    assert host.is_pinned() and host.data_ptr() == batch.ids.ctypes.data  # a view, no staging copy
    for tok in pipe.tok.values():
        tok.close()


def test_native_open_loops_give_the_in_process_ids_for_every_request(start_agent) -> None:
    """The C++ load generator: every request is answered once, with the ids this process makes."""
    from outboard import _bench, _core
    from outboard.offload import open_local

    agent = start_agent("--tokenize-threads", "1")
    client = outboard.connect(agent.address)
    remote = client.tokenizer("gpt2")
    local = open_local("gpt2")
    texts = [f"request {i}: {'naïve café ' * (i % 7)}the ids land in place".encode() for i in range(60)]
    texts[5] = b""  # no ids at all
    arrivals = [i * 0.0005 for i in range(len(texts))]
    expected = [_core.checksum(local.encode(t).tobytes()) for t in texts]
    assert [_core.checksum(local.encode(t)) for t in texts] == expected  # read in place, same digest
    try:
        floor = _bench.bench_open_loop_arrivals(arrivals)
        assert floor["cpu_s"] > 0 and floor["wall_s"] >= arrivals[-1]
        host = _bench.bench_open_loop_host(local._core, texts, arrivals, 2, 10.0)
        on_agent = _bench.bench_open_loop_agent(client.connection, remote._remote, texts, arrivals, 10.0)
        for r in (host, on_agent):
            assert r["failed"] == 0 and len(r["latency_us"]) == len(texts)
            assert list(r["checksums"]) == expected
            assert (r["latency_us"] > 0).all() and r["wall_s"] >= arrivals[-1] and r["cpu_s"] > 0
        assert on_agent["submit_cpu_s"] == on_agent["wait_cpu_s"] == on_agent["completion_cpu_s"] == 0  # not asked
        timed = _bench.bench_open_loop_agent(client.connection, remote._remote, texts, arrivals, 10.0, time_phases=True)
        assert list(timed["checksums"]) == expected
        assert timed["submit_cpu_s"] > 0 and timed["wait_cpu_s"] > 0 and timed["completion_cpu_s"] > 0
        assert timed["submit_cpu_s"] + timed["wait_cpu_s"] + timed["completion_cpu_s"] <= timed["cpu_s"]
        with pytest.raises(outboard.errors.InvalidArgument, match="one text per arrival"):
            _bench.bench_open_loop_agent(client.connection, remote._remote, texts, arrivals[:-1], 10.0)
    finally:
        remote.close()
        client.close()


def test_native_open_loop_fails_requests_of_a_killed_agent_within_their_timeout(start_agent) -> None:
    from outboard import _bench

    agent = start_agent()
    client = outboard.connect(agent.address)
    remote = client.tokenizer("gpt2")
    texts = [b"the agent dies before these arrive"] * 20
    arrivals = [0.3 + i * 0.01 for i in range(len(texts))]
    threading.Timer(0.1, lambda: os.kill(agent.pid, signal.SIGKILL)).start()
    start = time.monotonic()
    try:
        with pytest.raises(outboard.Error):  # a submit refused on a connection known to be dead
            _bench.bench_open_loop_agent(client.connection, remote._remote, texts, arrivals, 1.0)
        assert time.monotonic() - start < 0.3 + 0.2 + 1.0 + 1.0
    finally:
        client.close()
