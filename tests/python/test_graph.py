"""outboard.Graph / Instance / Executor from Python: native engines, Python bodies, errors."""

from __future__ import annotations

import gc
import hashlib
import select
import threading
import time

import numpy as np
import pytest

import outboard
from outboard import errors


def seed_graph(check) -> tuple[outboard.Graph, int, int, int]:
    g = outboard.Graph("seed")
    sha, dma = g.add_engine("sha", "sha256"), g.add_engine("dma", "dma")
    node = g.add_user("check", check)
    g.add_dependency(sha, node)
    g.add_dependency(dma, node)
    g.freeze()
    return g, sha, dma, node


@pytest.mark.parametrize("threads", [0, 2])
def test_seed_graph_many_instances_in_flight(threads: int) -> None:
    checked = []

    def check(ctx) -> None:
        src, dst, digest = ctx
        assert bytes(digest) == hashlib.sha256(src.tobytes()).digest()
        assert np.array_equal(src, dst)
        checked.append(int(src[0]))

    g, sha, dma, node = seed_graph(check)
    rng = np.random.default_rng(1)
    with outboard.Executor(threads=threads) as ex:
        insts = []
        for i in range(50):
            src = rng.integers(0, 256, 1024, dtype=np.uint8)
            src[0] = i
            dst, digest = np.zeros(1024, np.uint8), np.zeros(32, np.uint8)
            inst = g.instance()
            inst.set_sha256(sha, src, digest)
            inst.set_copy(dma, src, dst)
            inst.set_data(node, (src, dst, digest))
            ex.submit(inst)
            insts.append(inst)
        for inst in insts:
            ex.wait(inst, timeout=20)
    assert sorted(checked) == list(range(50))


def test_errors_name_the_node_and_the_limit() -> None:
    g = outboard.Graph("g")
    a = g.add_user("a", lambda d: None)
    b = g.add_user("b", lambda d: None)
    g.add_dependency(a, b)
    with pytest.raises(errors.InvalidArgument, match="edge 'b' -> 'a' closes a cycle"):
        g.add_dependency(b, a)
    with pytest.raises(errors.InvalidArgument, match="self-edge on node 'a'"):
        g.add_dependency(a, a)
    with pytest.raises(errors.InvalidArgument, match="node 9 does not exist"):
        g.add_dependency(a, 9)
    with pytest.raises(errors.BadState, match="not frozen"):
        g.instance()
    with pytest.raises(errors.NotFound, match="engine 'md5'"):
        g.add_engine("x", "md5")
    g.freeze()
    with pytest.raises(errors.BadState, match="after freeze"):
        g.add_user("c", lambda d: None)
    with outboard.Executor(threads=0, max_in_flight=1) as ex:
        i1, i2 = g.instance(), g.instance()
        ex.submit(i1)
        with pytest.raises(errors.BadState, match="already in flight"):
            ex.submit(i1)
        with pytest.raises(errors.Again, match="reach max_in_flight 1"):
            ex.submit(i2)
        ex.wait(i1, timeout=5)
        ex.submit(i2)
        ex.wait(i2, timeout=5)


def test_a_raising_body_fails_its_instance_only() -> None:
    ran = []
    g = outboard.Graph("g")
    first = g.add_user("first", lambda d: 1 / d)
    after = g.add_user("after", lambda d: ran.append(d))
    g.add_dependency(first, after)
    g.freeze()
    with outboard.Executor(threads=2) as ex:
        bad, good = g.instance(), g.instance()
        bad.set_data(first, 0)
        good.set_data(first, 1)
        good.set_data(after, "good")
        bad.set_data(after, "bad")
        ex.submit(bad)
        ex.submit(good)
        with pytest.raises(errors.Failed, match="^failed: first: ZeroDivisionError: division by zero$"):
            ex.wait(bad, timeout=10)
        ex.wait(good, timeout=10)
    assert ran == ["good"]


def test_wait_deadline_with_a_blocked_body() -> None:
    release = threading.Event()
    g = outboard.Graph("g")
    g.add_user("blocks", lambda d: release.wait(10))
    g.freeze()
    with outboard.Executor(threads=1, callers_execute=False) as ex:
        inst = g.instance()
        ex.submit(inst)
        t0 = time.monotonic()
        with pytest.raises(errors.TimedOut):
            ex.wait(inst, timeout=0.05)
        assert time.monotonic() - t0 < 2
        assert inst.in_flight
        release.set()
        ex.wait(inst, timeout=10)


def test_queued_completions_and_event_fd() -> None:
    g = outboard.Graph("g")
    g.add_user("x", lambda d: None)
    g.freeze()
    with outboard.Executor(threads=1, completion="queued") as ex:
        fd = ex.event_fd()
        inst = g.instance()
        ex.submit(inst)
        readable, _, _ = select.select([fd], [], [], 10)
        assert readable == [fd]
        assert ex.progress() >= 1
        ex.wait(inst, timeout=1)
        assert not inst.in_flight


def test_dropping_everything_mid_run_is_safe() -> None:
    # The Python wrappers own what the runtime borrows: bodies and data stay
    # alive until the run ends, however the references are dropped.
    seen = []
    g = outboard.Graph("g")
    n = g.add_user("slow", lambda d: (time.sleep(0.05), seen.append(d)))
    g.freeze()
    ex = outboard.Executor(threads=1, callers_execute=False)
    inst = g.instance()
    inst.set_data(n, ["payload"])
    ex.submit(inst)
    del g, inst
    gc.collect()
    ex.close()
    assert seen == [["payload"]]


def test_timing_and_state_bytes() -> None:
    g = outboard.Graph("chain")
    prev = g.add_user("0", lambda d: None)
    for i in range(1, 5):
        node = g.add_user(str(i), lambda d: None)
        g.add_dependency(prev, node)
        prev = node
    g.freeze()
    assert len(g) == 5 and g.edges == 4
    assert g.instance_state_bytes < 512  # counters and flags, not a copy of the graph
    with outboard.Executor(threads=0) as ex:
        inst = g.instance()
        inst.enable_timing()
        ex.submit(inst)
        ex.wait(inst, timeout=5)
        t = inst.timing()
    assert t.shape == (5, 2) and t.dtype == np.uint64
    assert (t[:, 1] >= t[:, 0]).all() and (t[1:, 0] >= t[:-1, 1]).all()
