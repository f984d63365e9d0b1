#!/usr/bin/env python3
"""Writes the seed corpora of the wire fuzzers (tests/fuzz/corpus/<target>/): one valid input
of each shape a peer sends, so a brief run starts from messages that decode. Re-run after a
format changes; crashes found later are added beside these by hand, named regression-*."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fuzz" / "corpus"


NO_BELL = 0xFFFFFFFF  # bootstrap.h's kNoBell


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack("<IBBHI", 0x3142424F, kind, 3, 0, len(payload)) + payload


def blob(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def hello(ring: bool) -> bytes:
    body = struct.pack("<III", 7, 4242, 1) + bytes(range(32)) + struct.pack("<QIQ", 1 << 20, 256, 1 << 27)
    body += blob(b"\x01" * 180) + (struct.pack("<I", 64) + blob(b"\x02" * 60) + struct.pack("<I", 9) if ring
                                    else struct.pack("<I", 0) + blob(b"") + struct.pack("<I", NO_BELL))
    return frame(1, body)


def welcome() -> bytes:
    body = struct.pack("<II", 3, 5151) + blob(b"\x03" * 200) + struct.pack("<QIQ", 1 << 26, 256, 1 << 27)
    names = [b"echo", b"graph", b"memory", b"sink", b"stats", b"tokenize"]
    body += struct.pack("<I", len(names)) + b"".join(blob(n) for n in names) + struct.pack("<I", 0) + blob(b"")
    body += struct.pack("<I", NO_BELL)
    facts = [(b"tokenize_threads", 2), (b"graph_threads", 0)]
    body += struct.pack("<I", len(facts)) + b"".join(blob(n) + struct.pack("<Q", v) for n, v in facts)
    return frame(2, body)


def refusal() -> bytes:
    return frame(3, struct.pack("<b", -6) + blob(b"64 connections in their handshake reach 64"))


def posix_key(pid: int, fd: int, address: int, length: int) -> bytes:
    seg_id = (1 << 63) | (1 << 62) | (fd << 30) | pid
    return struct.pack("<QQQ", seg_id, address, length)


def descriptor(parts: list[tuple[int, bytes]], base: int = 0x7F0000000000, length: int = 4096) -> bytes:
    md_map = 0
    keys = b""
    for index, key in sorted(parts):
        md_map |= 1 << index
        keys += bytes([len(key)]) + key
    return struct.pack("<IQQQB", 0x3152424F, base, length, md_map, 0) + keys


def frame_header(kind: int, flags: int, extra: bytes) -> bytes:
    return struct.pack("<BBbBII", 4, kind, 0, flags, 9, 17) + extra


def main() -> int:
    seeds: dict[str, dict[str, bytes]] = {
        "bootstrap": {
            "hello": b"\x07" + hello(ring=False),
            "hello-ring": b"\x00" + hello(ring=True),
            "welcome": b"\xff" + welcome(),
            "refusal": b"\x03" + refusal(),
        },
        "frame": {
            "request": frame_header(4, 0x30, struct.pack("<QI", 5, 2)),
            "response-credit": frame_header(5, 0x50, struct.pack("<QIQ", 5, 1, 64)),
            "notify": frame_header(7, 0xB0, struct.pack("<QIQ", 1, 3, 4096)),
        },
        "descriptor": {
            # The fuzzer's pid never matches: these reach the posix checks and fail there.
            "posix-shm": b"\x01" + descriptor([(0, b""), (3, posix_key(1234, 27, 0x7F0000000000, 8192))]),
            "tcp-only": b"\x00" + descriptor([(1, b""), (2, b"")]),
            "sysv": b"\x01" + descriptor([(2, struct.pack("<IQ", 5, 0x7F0000000000))]),
            "process": b"\x01" + struct.pack("<IQQ", 0x3150424F, 0x7F0000000000, 4096),
        },
        "config": {
            "size": b"\x00" + b"64MiB",
            "json": b"\x01" + b'{"listen": "127.0.0.1:7000", "max-msg-size": "1MiB", "tokenize-threads": 2}',
            "argv": b"\x02" + b"--listen\x00127.0.0.1:0\x00--isolation\x00none\x00--spin-us\x000",
            "setup": b"\x03" + b'{"options": {"listen": "127.0.0.1:1"}, "transports": "posix", "net_devices": ""}',
        },
    }
    # Services: byte 0 picks echo, graph, memory, sink, stats, tokenize (| 0x80: one-way).
    encode = struct.pack("<IIQQIIB7x", 0, 0, 0, 1024, 2, 0, 0) + struct.pack("<QQ", 5, 6) + b"hello world!"
    in_band = struct.pack("<IIQQIIB7x", 0, 9, 0, 1024, 2, 0, 16) + struct.pack("<QQ", 5, 6) + b"hello world!"
    graph = b"G" + blob(b"seed") + struct.pack("<QI", 4096, 2) + b"\x01" + blob(b"sha") + b"\x03" + blob(b"check")
    graph += struct.pack("<III", 1, 0, 1)
    seeds["service_requests"] = {
        "echo": b"\x00hello",
        "graph-ship": b"\x01" + graph,
        "graph-instance": b"\x01I" + struct.pack("<I", 0) + bytes(96),
        "graph-submit": b"\x01S" + struct.pack("<III", 1, 0, 1) + struct.pack("<QI", 0, 4) + b"abcd",
        "memory-allocate": b"\x02A" + struct.pack("<Q", 4096),
        "memory-fill": b"\x02P" + struct.pack("<Q", 7),
        "memory-checksum": b"\x02S" + struct.pack("<QQ", 0, 64),
        "sink": b"\x83some bytes to tally",
        "stats": b"\x04",
        "tokenize-open": b"\x05Ogpt2",
        "tokenize-encode": b"\x05E" + encode,
        "tokenize-encode-in-band": b"\x05E" + in_band,  # kIdsInBand: no output named (9 is none)
        "tokenize-upload": b"\x05L\x03[PAD]\n[UNK]\nhello\n",
    }
    # mpi_post: services/mpi_wire.h, a post (version, kind, comm, seq, size, rank, coll, elem, op, flags, root,
    # bytes, send and receive offsets, arrays, regions, with kFreed the regions freed, with kSpans the agents),
    # another agent's share
    # (whole, or its first piece) or a piece of one (comm, seq, from, offset, data), forwarded send (its data, or with kFollows a piece at its offset) or watch, a rank's reach (value,
    # region) or point-to-point message (comm, size, rank, peer, tag, flags, bytes, id, region, with kRemote
    # the token and the other agent), and the envelope answering one.
    mpi_wire = 5
    def post(coll: int, elem: int, op: int, flags: int, root: int, nbytes: int, arrays: bytes, send: bytes,
             recv: bytes, spans: bytes = b"", freed: bytes = b"") -> bytes:
        flags |= (4 if spans else 0) | (32 if freed else 0)
        return (struct.pack("<BBQQIIBBBBIQQQ", mpi_wire, 0, 7, 3, 2, 1, coll, elem, op, flags, root, nbytes, 0, 64)
                + arrays + blob(send) + blob(recv) + freed + spans)
    def p2p(kind: int, peer: int, tag: int, flags: int, nbytes: int, region: bytes, remote: bytes = b"") -> bytes:
        return (struct.pack("<BBQIIiiBQQ", mpi_wire, kind, 0, 4, 1, peer, tag, flags | (2 if remote else 0), nbytes,
                            5) + blob(region) + remote)
    def forward(flags: int, data: bytes, nbytes: int, offset: int = 0) -> bytes:
        return struct.pack("<BBQIIIiBQQQ", mpi_wire, 7, 0, 4, 1, 2, 3, flags, nbytes, 9, offset) + data
    remote = b"ab" * 32 + blob(b"127.0.0.1:7001")
    agents = (b"ab" * 32 + struct.pack("<I", 2) + blob(b"127.0.0.1:7000") + blob(b"127.0.0.1:7001")
              + struct.pack("<III", 2, 0, 1))
    def share(coll: int, elem: int, op: int, nbytes: int, blocks: list[bytes], first_piece: int = 0) -> bytes:
        """Whole, or with first_piece > 0 only the blocks' first `first_piece` bytes (kFirstPiece)."""
        data = b"".join(blocks)
        return (struct.pack("<BBQQIIBBBIQBI", mpi_wire, 1, 7, 3, 2, 1, coll, elem, op, 0, nbytes,
                            1 if first_piece else 0, len(blocks))
                + b"".join(struct.pack("<Q", len(b)) for b in blocks) + (data[:first_piece] if first_piece else data))
    v = b"".join(struct.pack("<IQQ", 2, a, b) for a, b in ((4, 4), (0, 4), (4, 4), (0, 4)))
    seeds["mpi_post"] = {
        "alltoall": post(0, 0, 0, 0, 0, 64, b"", b"send-key", b"recv-key"),
        "alltoallv": post(1, 0, 0, 0, 0, 0, v, b"send-key", b"recv-key"),
        "allgather-in-place": post(2, 0, 0, 1, 0, 32, b"", b"", b"recv-key"),
        "bcast": post(3, 0, 0, 0, 1, 128, b"", b"", b"buffer-key"),
        "allreduce": post(4, 4, 1, 0, 0, 64, b"", b"send-key", b"recv-key"),
        "allreduce-kept-in-place": post(4, 2, 4, 3, 0, 64, b"", b"", b"staging-key"),
        "zero": post(0, 0, 0, 0, 0, 0, b"", b"", b""),
        "alltoall-own-block": post(0, 0, 0, 8, 0, 64, b"", b"send-key", b"recv-key"),
        "alltoall-spanning": post(0, 0, 0, 2, 0, 64, b"", b"send-key", b"recv-key", agents),
        "alltoall-kept-freed": post(0, 0, 0, 2, 0, 64, b"", b"send-key", b"recv-key",
                                    freed=struct.pack("<I", 2) + blob(b"old-key") + blob(b"older-key")),
        "share-alltoall": share(0, 0, 0, 4, [b"abcd"]),
        "share-allreduce": share(4, 3, 1, 8, [b"12345678"]),
        "share-bcast-empty": share(3, 0, 0, 8, [b""]),
        "share-first-piece": share(0, 0, 0, 4, [b"abcd", b"efgh"], 3),
        "share-piece": struct.pack("<BBQQIQ", mpi_wire, 9, 7, 3, 1, 3) + b"defgh",
        "reach": struct.pack("<BBQ", mpi_wire, 2, 0x5EED) + blob(struct.pack("<IQQ", 0x3150424F, 0x7F0000000000, 8)),
        "p2p_send": p2p(3, 2, 7, 1, 64, b"send-key"),
        "p2p_recv_any": p2p(4, -1, -1, 0, 64, b"recv-key"),
        "p2p_probe": p2p(5, 3, -1, 0, 0, b""),
        "p2p_cancel": p2p(6, -1, -1, 0, 0, b""),
        "p2p_send_remote": p2p(3, 2, 7, 0, 64, b"send-key", remote),
        "p2p_recv_remote": p2p(4, 2, 7, 0, 64, b"recv-key", remote),
        "forward": forward(1, b"abcd", 4),
        "forward_later": forward(2, b"", 4),
        "forward_follows": forward(4, b"abcd", 4),
        "forward_follows_piece": forward(4, b"cd", 4, 2),
        "forward_gone": forward(12, b"", 4),
        "watch": bytes([mpi_wire, 8]),
        "envelope": struct.pack("<IiQB", 2, 7, 64, 1),
    }
    # checkpoint_save: services/checkpoint_wire.h, an open (keep_last, directory), a save (handle, step, region,
    # tensors: name, dtype, dims, offset, bytes; the state's JSON), a close (handle), a piece (handle, step,
    # offset, bytes) of an in-band save (no region), a list (handle) or a read (handle, step, file, offset, length).
    version = 3  # checkpoint_wire::kVersion
    def tensor(name: bytes, dtype: int, dims: list[int], offset: int, nbytes: int) -> bytes:
        return (blob(name) + struct.pack("<BB", dtype, len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
                + struct.pack("<QQ", offset, nbytes))
    def save(step: int, tensors: list[bytes], state: bytes) -> bytes:
        return (struct.pack("<BBIQ", version, 1, 0, step) + blob(b"staging-key") + struct.pack("<I", len(tensors))
                + b"".join(tensors) + blob(state))
    seeds["checkpoint_save"] = {
        "open": struct.pack("<BBI", version, 0, 3) + blob(b"run-1/checkpoints"),
        "save": save(42, [tensor(b"model.fc.weight", 9, [4, 8], 0, 128), tensor(b"model.fc.bias", 9, [4], 128, 16),
                          tensor(b"optimizer.state.0.step", 11, [], 192, 8)],
                     b'{"dict":[["epoch",{"v":3}],["model",{"tensor":"model.fc.weight"}]]}'),
        "save-empty": save(0, [], b"null"),
        "close": struct.pack("<BBI", version, 2, 0),
        "save-in-band": save(7, [tensor(b"w", 1, [3], 0, 3)], b"{}").replace(blob(b"staging-key"), blob(b"")),
        "piece": struct.pack("<BBIQQ", version, 3, 0, 7, 0) + b"abc",
        "list": struct.pack("<BBI", version, 4, 0),
        "read": struct.pack("<BBIQBQI", version, 5, 0, 7, 0, 0, 4 << 20),
    }
    for target, files in seeds.items():
        d = CORPUS / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (d / name).write_bytes(data)
    print(f"wrote {sum(len(f) for f in seeds.values())} seeds under {CORPUS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
