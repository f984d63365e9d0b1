"""One-sided data path against the agent's memory service."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import outboard
from outboard import _bench, _core, errors

from dlpack_support import dlpack


def op(code: str, *args: int, tail: bytes = b"") -> bytes:
    return code.encode() + struct.pack(f"<{len(args)}Q", *args) + tail


def u64(b: bytes) -> int:
    return struct.unpack("<Q", b)[0]


def test_put_get_round_trip_is_verified_on_both_sides(client: outboard.Client) -> None:
    conn = client.connection
    remote = conn.import_region(client.request("memory", op("A", 1 << 20)))
    assert remote.size == 1 << 20
    data = _core.pattern(300_000, seed=3)
    conn.put(remote, 1000, data, 10.0)
    conn.flush(10.0)
    assert u64(client.request("memory", op("S", 1000, len(data)))) == _core.checksum(data)
    assert conn.get(remote, 1000, len(data), 10.0) == data


@pytest.mark.parametrize("mapped", [True, False])
def test_a_mapped_region_and_ucx_move_the_same_bytes(agent: outboard.LocalAgent, mapped: bool) -> None:
    with outboard.connect(agent.address, map_peer_regions=mapped) as client:
        conn = client.connection
        remote = conn.import_region(client.request("memory", op("A", 1 << 16)))
        assert remote.mapped is mapped  # the agent is on this host: UCX maps its region here
        data = _core.pattern(20_000, seed=7)
        conn.put(remote, 64, data, 10.0)
        assert u64(client.request("memory", op("S", 64, len(data)))) == _core.checksum(data)
        assert conn.get(remote, 64, len(data), 10.0) == data


def test_out_of_bounds_put_is_an_error_and_writes_nothing(client: outboard.Client) -> None:
    conn = client.connection
    remote = conn.import_region(client.request("memory", op("A", 4096)))
    client.request("memory", op("P", 11))
    before = client.request("memory", op("S", 0, 4096))
    with pytest.raises(errors.OutOfRange) as e:
        conn.put(remote, 4000, b"\xff" * 100, 10.0)
    assert str(e.value) == "out of range: put of 100 B at offset 4000 exceeds remote region of 4096 B"
    with pytest.raises(errors.OutOfRange):
        conn.get(remote, 4096, 1, 10.0)
    assert client.request("memory", op("S", 0, 4096)) == before
    assert client.request("echo", b"still fine") == b"still fine"


def test_agent_write_with_notify_lands_before_the_notification(client: outboard.Client) -> None:
    conn = client.connection
    buf = np.zeros(1 << 20, dtype=np.uint8)
    region = conn.register_memory(buf)
    for i in range(10):
        offset, length = i * 4096, 5000 + i * 70_000
        digest = u64(client.request("memory", op("W", 500 + i, offset, length, i, tail=region.descriptor)))
        kind, cookie, at, n = client.receive(timeout=10)
        assert (kind, cookie, at, n) == ("notify", 500 + i, offset, length)
        assert _core.checksum(buf[offset:offset + length].tobytes()) == digest


def test_a_gpu_region_is_refused_naming_why_where_ucx_has_no_cuda(client: outboard.Client) -> None:
    if _core.transport_carries_gpu_memory():
        pytest.skip("this UCX carries CUDA memory: GPU regions are allocated (C++ RegionTest checks that path)")
    conn = client.connection
    with pytest.raises(errors.Unsupported, match="GPU memory region of 4096 B: this UCX has no CUDA memory support"):
        client.request("memory", op("A", 4096, tail=b"\x01"))
    with pytest.raises(errors.Unsupported, match="GPU memory region of"):
        _bench.bench_one_sided_bandwidth([conn], True, 4096, 4, 2, 1, False, 10.0, gpu_target=True)
    remote = conn.import_region(client.request("memory", op("A", 4096)))  # the connection serves on
    data = _core.pattern(4096, seed=5)
    conn.put(remote, 0, data, 10.0)
    assert conn.get(remote, 0, len(data), 10.0) == data


def test_a_gpu_tensors_memory_is_registered_as_gpu_memory(client: outboard.Client) -> None:
    """register_memory takes any C-contiguous array: by DLPack, a CUDA tensor's memory is registered as
    GPU memory (refused here naming why), pinned host memory as host memory, other devices not."""
    conn = client.connection
    if not _core.transport_carries_gpu_memory():
        capsule, keep = dlpack(0x7F0000000000, 2, 1024)
        with pytest.raises(errors.Unsupported, match="GPU memory region of 4096 B: this UCX has no CUDA memory"):
            conn.register_memory(capsule)
    host = np.zeros(1024, np.float32)
    capsule, keep = dlpack(host.ctypes.data, 3, 1024)
    region = conn.register_memory(capsule)
    assert (region.size, region.gpu) == (4096, False)
    region.array()[:4] = [1, 2, 3, 4]
    assert host.view(np.uint8)[:4].tolist() == [1, 2, 3, 4]
    capsule, keep = dlpack(host.ctypes.data, 4, 1024)
    with pytest.raises(errors.InvalidArgument, match="DLPack device type 4: only CPU and CUDA memory"):
        conn.register_memory(capsule)
    region = conn.register_memory(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert (region.size, region.gpu) == (48, False)
    for junk, name in ((np.zeros((4, 4))[:, ::2], "ndarray"), ("text", "str")):  # never a copy of it registered
        with pytest.raises(errors.InvalidArgument, match=f"takes a C-contiguous array .*, not this {name}"):
            conn.register_memory(junk)


def test_allocated_region_is_a_numpy_view(client: outboard.Client) -> None:
    region = client.connection.allocate_memory(4096)
    view = region.array()
    view[:4] = [1, 2, 3, 4]
    assert region.array()[:4].tolist() == [1, 2, 3, 4]
    assert len(region.descriptor) > 20


def test_gather_copies_every_size_to_every_alignment(client: outboard.Client) -> None:
    # The copy streams 64 B at a time past a 16 B-aligned head: heads, bodies and tails of each length.
    region = client.connection.allocate_memory(1 << 16)
    rng = np.random.default_rng(7)
    sources = [rng.integers(0, 256, n, dtype=np.uint8) for n in (*range(0, 160), 4095, 4096, 12345)]
    offsets, at = [], 0
    for i, s in enumerate(sources):
        at += i % 17  # every destination alignment mod 16
        offsets.append(at)
        at += s.size
    region.array()[:] = 0xEE
    region.gather(sources, offsets)
    staged = region.array()
    for s, o in zip(sources, offsets):
        assert np.array_equal(staged[o:o + s.size], s)
    gaps = np.ones(staged.size, bool)
    for s, o in zip(sources, offsets):
        gaps[o:o + s.size] = False
    assert (staged[gaps] == 0xEE).all()  # nothing written outside the sources' places


def test_gather_copies_arrays_and_addresses_and_refuses_what_ends_past_the_region(client: outboard.Client) -> None:
    region = client.connection.allocate_memory(4096)
    a, b = np.arange(10, dtype=np.int64), np.arange(7, dtype=np.uint8) + 100
    region.gather([a, (b.ctypes.data, b.nbytes), np.empty(0, np.float32)], [0, 100, 4096])
    assert np.array_equal(region.array()[:80].view(np.int64), a) and region.array()[100:107].tolist() == b.tolist()
    with pytest.raises(errors.InvalidArgument, match=r"source 1 \(80 B at 4090\) ends past the region's 4096 B"):
        region.gather([b, a], [0, 4090])
    with pytest.raises(errors.InvalidArgument, match="2 sources, 1 offsets"):
        region.gather([a, b], [0])
    with pytest.raises(ValueError, match="not C-contiguous"):
        region.gather([a[::2]], [0])
    with pytest.raises(errors.InvalidArgument, match=r"source 1 is a tuple but not \(address, size\)"):
        region.gather([a, ("not an address", 8)], [0, 100])  # a's buffer, taken before, is given back
    with pytest.raises(errors.InvalidArgument, match=r"source 0 is a tuple but not \(address, size\)"):
        region.gather([(b.ctypes.data,)], [0])
    a.resize(5, refcheck=True)  # refused while a buffer of it were still held
    assert region.array()[:80].view(np.int64).tolist() == list(range(10)), "a refused gather copies nothing"


def test_region_larger_than_agent_limit_is_refused(start_agent) -> None:
    agent = start_agent("--max-region-size", "1MiB")
    with outboard.connect(agent.address) as c:
        with pytest.raises(errors.TooBig) as e:
            c.request("memory", op("A", 2 << 20))
        assert "exceeds max_region_size 1048576 B" in str(e.value)


def test_client_write_with_notify_is_visible_to_the_agent_service(client: outboard.Client) -> None:
    conn = client.connection
    remote = conn.import_region(client.request("memory", op("A", 1 << 20)))
    for i in range(300):
        offset, data = (i * 997) % 500_000, _core.pattern(1 + (i * 7919) % 400_000, seed=i)
        conn.put_notify(remote, offset, data, 1000 + i, 10.0, service="memory")
        kind, reply = client.receive(timeout=10)
        assert kind == "message"
        assert struct.unpack("<QQ", reply) == (1000 + i, _core.checksum(data))


def test_fence_orders_puts(client: outboard.Client) -> None:
    conn = client.connection
    remote = conn.import_region(client.request("memory", op("A", 4096)))
    for i in range(50):
        conn.put(remote, 0, bytes([i]) * 4096, 10.0)
        conn.fence()
    conn.flush(10.0)
    assert conn.get(remote, 0, 4096, 10.0) == bytes([49]) * 4096


def test_put_signal_pings_come_back_from_the_agents_mirror(client: outboard.Client) -> None:
    # Slot k is `size` bytes at k * size, its last 8 the signal word.
    conn, size, slots, pings = client.connection, 200, 3, 30
    remote = conn.import_region(client.request("memory", op("A", slots * size)))
    mine = conn.allocate_memory(slots * size)
    mine.array()[:] = 0
    answers = []
    conn.submit("memory", op("M", size, slots, pings, 5000, tail=mine.descriptor), 10.0,
                lambda response, error: answers.append((response, error)))
    for i in range(1, pings + 1):
        at, data = (i - 1) % slots * size, _core.pattern(size - 8, seed=i)
        conn.put_signal(remote, at, data, at + size - 8, i, 10.0)
        conn.wait_signal(mine, at + size - 8, i, 10.0)
        assert mine.array()[at:at + size - 8].tobytes() == data
    while not answers:
        conn.progress()
    assert answers == [(struct.pack("<Q", pings), None)]


def test_wait_signal_times_out_and_bad_offsets_are_refused(client: outboard.Client) -> None:
    conn = client.connection
    mine = conn.allocate_memory(4096)
    mine.array()[:] = 0
    with pytest.raises(errors.TimedOut, match="is 0, not yet 5"):
        conn.wait_signal(mine, 0, 5, 0.05)
    remote = conn.import_region(client.request("memory", op("A", 4096)))
    with pytest.raises(errors.InvalidArgument, match="not a multiple of 8"):
        conn.put_signal(remote, 0, b"x", 3, 1, 10.0)
    with pytest.raises(errors.OutOfRange):
        conn.put_signal(remote, 0, b"x", 4096, 1, 10.0)


def test_the_agent_answers_once_the_signal_word_lands_with_the_bytes_before_it(client: outboard.Client) -> None:
    """memory 'G': the agent polls a signal word of its region (what a GPU kernel's stores end with) and
    answers with the checksum of the bytes before it; it never waits past its deadline."""
    conn = client.connection
    remote = conn.import_region(client.request("memory", op("A", 4096 + 8)))
    data = _core.pattern(4096, seed=11)
    conn.put_signal(remote, 0, data, 4096, 3, 10.0)
    conn.flush(10.0)
    assert u64(client.request("memory", op("G", 4096, 3, 4096, 1000))) == _core.checksum(data)
    with pytest.raises(errors.TimedOut, match="signal word at offset 4096 holds 3, not 4, after 50 ms"):
        client.request("memory", op("G", 4096, 4, 4096, 50))
    with pytest.raises(errors.OutOfRange, match="signal word at offset 4092"):
        client.request("memory", op("G", 4092, 1, 8, 50))
    with pytest.raises(errors.TooBig, match="exceeds 60000 ms"):
        client.request("memory", op("G", 4096, 1, 8, 60_001))
