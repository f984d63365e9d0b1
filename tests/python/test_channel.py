"""Channel integration: a real agent process, real UCX, checked payloads."""

from __future__ import annotations

import os
import random
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

import outboard
from outboard import _core, errors
from outboard._agent import agent_executable
from outboard.latency import transports

MAX_MSG = 64 << 20


@pytest.mark.parametrize("size", [0, 1, 4080, 4096, 65535, 65536, 1 << 20, MAX_MSG])
def test_echo_returns_every_byte(client: outboard.Client, size: int) -> None:
    payload = _core.pattern(size, seed=size)
    assert client.connection.peer_max_msg_size == MAX_MSG
    assert client.request("echo", payload, timeout=30) == payload


def test_oversize_message_is_refused_and_connection_stays_usable(start_agent) -> None:
    agent = start_agent("--max-msg-size", "65536")
    with outboard.connect(agent.address) as c:
        with pytest.raises(errors.TooBig) as e:
            c.request("echo", bytes(70000))
        assert e.value.message == "message of 70000 B exceeds max_msg_size 65536 B (agent option --max-msg-size)"
        with pytest.raises(errors.TooBig):
            c.send(bytes(65537), service="echo")
        assert c.request("echo", b"x" * 65536) == b"x" * 65536
        assert c.stats()["errors"] == 0  # refused on the client: nothing was sent


def test_1e5_messages_of_random_sizes_arrive_once_and_in_order(client: outboard.Client) -> None:
    rng = random.Random(7)
    count, window = 100_000, 64
    sent: list[bytes] = []
    received = 0

    def check_next() -> None:
        nonlocal received
        kind, data = client.receive(timeout=10)
        assert kind == "message"
        index = struct.unpack_from("<Q", data)[0]
        assert index == received, f"expected message {received}, got {index}"
        assert data == sent[received], f"message {received} corrupted"
        sent[received] = b""  # keep memory flat
        received += 1

    for i in range(count):
        size = rng.randrange(200_000) if rng.random() < 0.01 else rng.randrange(2048)
        payload = struct.pack("<Q", i) + _core.pattern(size, seed=i)
        sent.append(payload)
        client.send(payload, service="echo")
        while received < i - window:
            check_next()
    while received < count:
        check_next()
    print(f"compared {received} messages: 0 lost, 0 duplicated, 0 reordered")
    with pytest.raises(errors.TimedOut):
        client.receive(timeout=0.2)  # nothing extra arrives


def test_two_clients_at_once(agent: outboard.LocalAgent) -> None:
    failures: list[str] = []

    def run(seed: int) -> None:
        try:
            with outboard.connect(agent.address) as c:
                for i in range(3000):
                    p = _core.pattern(1 + (i * 37) % 9000, seed=seed * 100_000 + i)
                    if c.request("echo", p) != p:
                        failures.append(f"client {seed} request {i}")
                stats = c.stats()
                if stats["clients"] < 1:
                    failures.append("stats lost a client")
        except errors.Error as e:  # a thread's exception would not fail the test
            failures.append(f"client {seed}: {e}")

    threads = [threading.Thread(target=run, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_a_processes_connections_to_one_address_are_set_up_one_at_a_time() -> None:
    # What keeps UCX's pairing of endpoints (test below) in step with the agent: seen from a stand-in
    # agent, a plain socket that never answers the hello, the second connect starts once the first
    # has given up.
    with socket.create_server(("127.0.0.1", 0)) as server:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        gave_up: list[float] = []

        def connect() -> None:
            with pytest.raises(errors.TimedOut):
                outboard.connect(address, connect_timeout=0.5)
            gave_up.append(time.monotonic())

        threads = [threading.Thread(target=connect) for _ in range(2)]
        for t in threads:
            t.start()
        server.settimeout(5)
        first, _ = server.accept()
        second, _ = server.accept()
        accepted_second = time.monotonic()
        for t in threads:
            t.join()
        first.close()
        second.close()
    assert len(gave_up) == 2
    # The first thread reads its clock after the error left connect(), which already let the second
    # one in: allow that much. Connects at once would be accepted a whole timeout (0.5 s) apart.
    assert accepted_second >= min(gave_up) - 0.1


def test_closing_some_of_a_processes_connections_leaves_the_others_whole(agent: outboard.LocalAgent) -> None:
    # UCX pairs the endpoints of two workers by the order each side opened them. Opened at once from
    # several threads and paired crosswise, closing one connection cut off the messages of several
    # fragments (8 KB each over shared memory) that another one sent afterwards. A crossing needs the
    # threads to be scheduled just so (it took a loaded machine): the test above is the one that
    # fails when connects overlap, this one the path end to end.
    big = _core.pattern(40_000, seed=7)
    for _ in range(4):
        conns: list[outboard.Client] = []
        threads = [threading.Thread(target=lambda: conns.append(outboard.connect(agent.address))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(conns) == 4
        for c in conns[1:]:
            c.close()
        for _ in range(3):
            assert conns[0].request("echo", big, timeout=5) == big
        conns[0].close()


def test_same_host_connection_uses_shared_memory(client: outboard.Client) -> None:
    lanes = transports(client.connection.lanes)
    assert {"sysv", "posix"} & set(lanes), client.connection.lanes
    assert "tcp" not in lanes


def test_unknown_service_names_the_offered_ones(client: outboard.Client) -> None:
    with pytest.raises(errors.NotFound) as e:
        client.request("nope")
    assert "'nope'" in str(e.value) and "echo" in str(e.value)


def test_the_welcome_announces_the_agents_threads(start_agent) -> None:
    agent = start_agent("--tokenize-threads", "3", "--graph-threads", "2")
    with outboard.connect(agent.address) as client:
        assert client.connection.agent_info == {"tokenize_threads": 3, "graph_threads": 2}


def test_stats_count_traffic(client: outboard.Client) -> None:
    client.request("echo", b"12345")
    s = client.stats()
    assert s["clients"] == 1 and s["messages_in"] >= 2 and s["bytes_in"] >= 5
    assert set(s["services"]) >= {"echo", "stats", "memory"}


def test_async_requests_complete_through_event_fd_without_spinning(client: outboard.Client) -> None:
    import select

    conn = client.connection
    results: dict[int, bytes] = {}

    def done_for(i: int):
        def done(response, error) -> None:
            assert error is None, error
            results[i] = response
        return done

    for i in range(50):
        conn.submit("echo", b"async %d" % i, 10.0, done_for(i))
    sleeps = 0
    while len(results) < 50:
        if conn.arm():
            ready, _, _ = select.select([conn.event_fd], [], [], 5.0)
            assert ready, "event fd never became readable"
            sleeps += 1
        conn.progress()
    assert results == {i: b"async %d" % i for i in range(50)}


def test_async_request_to_unknown_service_raises_immediately(client: outboard.Client) -> None:
    with pytest.raises(errors.NotFound):
        client.connection.submit("nope", b"", 1.0, lambda r, e: None)


def test_agent_pins_to_requested_core(start_agent) -> None:
    from pathlib import Path
    agent = start_agent("--cores", "0")
    status = Path(f"/proc/{agent.pid}/status").read_text()
    assert "Cpus_allowed_list:\t0\n" in status
    with outboard.connect(agent.address) as c:
        assert c.request("echo", b"pinned") == b"pinned"


def test_graceful_close_is_seen_by_the_agent(agent: outboard.LocalAgent) -> None:
    a = outboard.connect(agent.address)
    b = outboard.connect(agent.address)
    assert b.stats()["clients"] == 2
    a.close()
    with pytest.raises(errors.NotConnected):
        a.request("echo", b"closed")
    deadline = 50
    while b.stats()["clients"] != 1 and deadline:
        deadline -= 1
    stats = b.stats()
    assert stats["clients"] == 1 and stats["disconnects"] == 1
    b.close()


def test_one_connection_shared_by_several_threads(client: outboard.Client) -> None:
    failures: list[str] = []

    def run(seed: int) -> None:
        for i in range(500):
            p = _core.pattern(1 + (seed * 131 + i) % 5000, seed=seed * 10_000 + i)
            if client.request("echo", p) != p:
                failures.append(f"thread {seed} request {i}")

    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_small_frames_go_through_a_two_slot_ring_and_stay_in_order_with_ucx_ones(start_agent) -> None:
    # Two slots fill at once: frames take the ring, the UCX path when it is
    # full, and UCX when they are too large for a slot, all in one stream.
    agent = start_agent("--ring-slots", "2")
    rng = random.Random(11)
    with outboard.connect(agent.address, ring_slots=2) as c:
        sent: list[bytes] = []
        received = 0
        for i in range(20_000):
            payload = struct.pack("<Q", i) + _core.pattern(rng.randrange(600), seed=i)
            sent.append(payload)
            c.send(payload, service="echo")
            while received < i - 32:
                kind, data = c.receive(timeout=10)
                assert kind == "message" and data == sent[received], f"message {received}"
                received += 1
        while received < len(sent):
            kind, data = c.receive(timeout=10)
            assert kind == "message" and data == sent[received], f"message {received}"
            received += 1
        s = c.stats()
    # Both ways, some frames went into the peer's ring and some through UCX.
    assert 0 < s["ring_frames_in"] < s["messages_in"], s
    assert 0 < s["ring_frames_out"] < s["messages_out"], s


@pytest.mark.parametrize("side", ["agent", "client"])
def test_rings_off_on_either_side_send_every_frame_through_ucx(start_agent, side: str) -> None:
    agent = start_agent(*(["--ring-slots", "0"] if side == "agent" else []))
    with outboard.connect(agent.address, ring_slots=0 if side == "client" else None) as c:
        for i in range(100):
            p = _core.pattern(64, seed=i)
            assert c.request("echo", p) == p
        s = c.stats()
    assert s["messages_in"] >= 100 and s["ring_frames_in"] == 0 and s["ring_frames_out"] == 0, s


def test_peers_asleep_over_their_rings_are_woken_by_the_doorbell(start_agent) -> None:
    # With no spinning both sides sleep between frames: each request and each
    # response must ring the sleeper, or wait for its 10 ms missed-wake-up bound.
    # On one core the agent, woken by a request, preempts the client and answers
    # before the client sleeps (no answer then needs a doorbell: 1 run in 2
    # measured), so each side has a core of its own.
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("one core: the agent answers before the client sleeps, so nothing would ring it")
    agent = start_agent("--spin-us", "0", "--cores", str(cores[1]))
    slow = 0
    os.sched_setaffinity(0, {cores[0]})
    try:
        with outboard.connect(agent.address, spin_us=0) as c:
            for i in range(200):
                p = _core.pattern(100, seed=i)
                t0 = time.perf_counter()
                assert c.request("echo", p) == p
                slow += time.perf_counter() - t0 >= 0.009
            s = c.stats()
    finally:
        os.sched_setaffinity(0, cores)
    assert s["doorbells_out"] > 0, s
    # The agent rang the client's bell pipe (Hub::offer_bell), which it opens where it may ptrace the client.
    if _may_ptrace_a_parent():
        assert s["doorbells_by_pipe"] == s["doorbells_out"], s
    assert slow < 20, f"{slow} of 200 requests waited out the missed-wake-up bound"


def _may_ptrace_a_parent() -> bool:
    """Whether an agent this process started may open its descriptors (/proc/<pid>/fd, as ptrace):
    Yama's ptrace_scope 1 and 2 refuse a child that unless it is root, 3 refuses everyone."""
    try:
        scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except FileNotFoundError:
        return True
    return scope == 0 or (scope < 3 and os.geteuid() == 0)


def test_ring_slots_must_be_a_power_of_two() -> None:
    r = subprocess.run([agent_executable(), "--ring-slots", "48"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "option 'ring-slots' is 48, expected 0 or a power of two" in r.stderr
