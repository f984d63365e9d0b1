"""The agent cross-built for aarch64 (`make agent-aarch64`), as a BlueField's Arm cores would run it, here
under qemu-user and serving this x86_64 process over TCP. Timing under emulation means nothing: the
bytes, ids and digests must be what the x86_64 agent gives."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from offload_support import sample_texts

import outboard
from outboard import _core, cli, errors, latency
from outboard.bench.suites import graph

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "build" / "aarch64" / "outboard-agent"
QEMU = ["qemu-aarch64-static", "-L", "/"]  # -L /: Debian's multiarch arm64 loader and libraries
BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
EM_AARCH64 = 183


def _skip_unless_runnable() -> None:
    if not AGENT.exists():
        pytest.skip(f"{AGENT} is missing: `make agent-aarch64` cross-builds it (Debian; scripts/bootstrap.sh "
                    "installs g++-aarch64-linux-gnu, qemu-user-static and the arm64 libraries)")
    if not BINFMT.exists() or "enabled" not in BINFMT.read_text():
        pytest.skip("qemu-aarch64 is not registered with binfmt_misc (scripts/bootstrap.sh does it as root): "
                    "the emulated agent could not start its session processes")


@pytest.fixture(scope="module")
def arm_agent() -> Iterator[outboard.LocalAgent]:
    _skip_unless_runnable()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OUTBOARD_AGENT", str(AGENT))
        # Its UCX offers TCP alone, so this x86_64 client reaches it as a client on another node would.
        agent = outboard.LocalAgent(prefix=QEMU, env={"UCX_TLS": "tcp"}).start()
    yield agent
    agent.stop()


@pytest.fixture(scope="module")
def arm(arm_agent: outboard.LocalAgent) -> Iterator[outboard.Client]:
    with outboard.connect(arm_agent.address, connect_timeout=30) as client:
        yield client


def test_the_agent_is_an_aarch64_program_that_names_its_version_and_ucx() -> None:
    _skip_unless_runnable()
    header = AGENT.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and struct.unpack_from("<H", header, 18)[0] == EM_AARCH64
    done = subprocess.run([*QEMU, AGENT, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"outboard-agent {outboard.__version__}, UCX ")
    assert "/aarch64-linux-gnu/libucp.so" in done.stdout, done.stdout


def test_echo_over_tcp_returns_every_byte_of_every_size(arm: outboard.Client) -> None:
    lanes = latency.transports(arm.connection.lanes)
    assert lanes and set(lanes) == {"tcp"}, lanes
    rng = np.random.default_rng(7)
    for size in (1, 63, 64, 4095, 4096, 65536):
        payload = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert arm.request("echo", payload, timeout=60) == payload, size


def test_sealed_frames_cross_between_its_openssl_and_this_builds_aes_gcm(tmp_path: Path) -> None:
    _skip_unless_runnable()
    keys = tmp_path / "keys"
    assert cli.main(["keys", "init", str(keys), "--agent-host", "127.0.0.1"]) == 0
    args = ["--secure", "always", "--cert", str(keys / "agent.pem"), "--key", str(keys / "agent.key"),
            "--ca", str(keys / "ca.pem")]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OUTBOARD_AGENT", str(AGENT))
        agent = outboard.LocalAgent(*args, prefix=QEMU, env={"UCX_TLS": "tcp"}).start()
    try:
        # Its build seals with OpenSSL (ipsec-mb is x86_64's); this one with ipsec-mb where it was found:
        # every frame below is sealed by one and opened by the other.
        with outboard.connect(agent.address, connect_timeout=30, secure="always", cert=str(keys / "client.pem"),
                              key=str(keys / "client.key"), ca=str(keys / "ca.pem")) as c:
            assert c.connection.security.startswith("TLS 1.3"), c.connection.security
            rng = np.random.default_rng(9)
            for size in (0, 1, 15, 16, 17, 4095, 65536, 1 << 20):
                payload = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
                assert c.request("echo", payload, timeout=60) == payload, size
    finally:
        agent.stop()


@pytest.mark.parametrize("model", ["gpt2", "bert-base-uncased"])
def test_tokenize_gives_the_x86_agents_ids(arm: outboard.Client, client: outboard.Client, model: str) -> None:
    texts = sample_texts()
    theirs = arm.tokenizer(model, placement="agent").encode_batch(texts)
    ours = client.tokenizer(model, placement="agent").encode_batch(texts)
    assert theirs.ok and ours.ok
    differing = [i for i in range(len(texts)) if not np.array_equal(theirs[i], ours[i])]
    assert differing == [], f"{model}: {len(differing)} of {len(texts)} texts differ, first {texts[differing[0]]!r}"
    assert sum(len(theirs[i]) for i in range(len(texts))) > 1000


def test_the_memory_service_moves_and_sums_the_same_bytes(arm: outboard.Client) -> None:
    conn = arm.connection
    remote = conn.import_region(arm.request("memory", b"A" + struct.pack("<Q", 1 << 20)))
    assert remote.size == 1 << 20 and not remote.mapped
    data = _core.pattern(300_000, seed=11)
    conn.put(remote, 4096, data, 60.0)
    conn.flush(60.0)
    summed = arm.request("memory", b"S" + struct.pack("<QQ", 4096, len(data)), timeout=60)
    assert struct.unpack("<Q", summed)[0] == _core.checksum(data)
    assert conn.get(remote, 4096, len(data), 60.0) == data


def test_a_graph_offloaded_to_it_hashes_and_copies_every_instance(arm_agent: outboard.LocalAgent) -> None:
    try:
        graph.executable()
    except errors.NotFound as e:
        pytest.skip(f"{e} (it is built where libtbb-dev is installed)")
    cell = {"pattern": "seed", "body": "seed", "mode": "sync", "K": 20, "threads": 2}
    rows = graph.run_cell("offload", cell, 1, agent=arm_agent.address)
    assert rows and all(r["check"] == "ok" for r in rows), rows
