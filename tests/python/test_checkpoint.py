"""Checkpoint offload against real agents: what is saved loads back (with safetensors alone too),
pruning, the policies, damaged checkpoints, disk full, crashes of agent and trainer, two trainers,
hostile requests, and memory over many saves."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

import outboard
from outboard import checkpoint, cli
from outboard.errors import BadConfig, BadState, InvalidArgument, IoError, NotFound, OutOfRange, TooBig
from test_secure import agent_args, certs, tenants


def make_state(seed: int, mb: float = 0.01) -> dict:
    rng = np.random.default_rng(seed)
    n = max(1, int(mb * (1 << 20)) // 4)
    return {
        "model": {"fc.weight": rng.standard_normal(n, dtype=np.float32).reshape(-1, 1),
                  "fc.bias": rng.integers(0, 100, 7).astype(np.int64), "flag": np.bool_(seed % 2)},
        "optimizer": {"state": {0: {"step": np.int64(seed), "exp_avg": rng.standard_normal((3, 2)).astype(np.float16)}},
                      "param_groups": [{"lr": 0.1 * seed, "params": [0], "betas": (0.9, 0.999)}]},
        "epoch": seed, "name": f"run-{seed}", "inf": float("inf"), "blob": bytes([seed % 256, 1, 2]), "none": None,
        "strided": np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::2],
        "big_endian": np.arange(5, dtype=">f4") * seed, "empty": np.zeros((0, 3), np.float32),
    }


def assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert np.asarray(b).dtype == np.asarray(a).dtype and np.array_equal(np.asarray(a), np.asarray(b))
    else:
        assert a == b or (a != a and b != b), (a, b)


def steps_on_disk(d: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in d.glob("step-*"))


def test_saved_state_loads_back_and_safetensors_alone_reads_it(tmp_path: Path) -> None:
    states = [make_state(s) for s in range(3)]
    with outboard.Checkpointer(tmp_path, keep_last=0) as ck:
        for step, state in enumerate(states):
            assert ck.save(step * 10, state)
        ck.wait()
        status = ck.status()
        assert (status.persisted, status.last_persisted, status.error) == (3, 20, None)
        assert ck.latest() == 20
        assert_same(states[2], ck.load())
        assert_same(states[1], ck.load(10))
    for step, state in zip((0, 10, 20), states):
        d = tmp_path / f"step-{step:012d}"
        manifest = json.loads((d / "manifest.json").read_text())
        data = (d / "tensors.safetensors").read_bytes()
        assert manifest["files"]["tensors.safetensors"] == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        from safetensors.numpy import load_file
        tensors = load_file(str(d / "tensors.safetensors"))
        assert np.array_equal(tensors["model.fc.weight"], state["model"]["fc.weight"])
        assert np.array_equal(tensors["optimizer.state.0.exp_avg"], state["optimizer"]["state"][0]["exp_avg"])
        assert np.array_equal(tensors["strided"], state["strided"])
    assert not list(tmp_path.glob(".tmp-*"))


def test_scalars_keys_and_colliding_names_round_trip(tmp_path: Path) -> None:
    state = {"floats": [1.0, -0.0, 0.1, 1e300, 5e-324, 123456789012.0, float("-inf"), float("nan")],
             "ints": [0, -1, 2**63 - 1, -2**63, 2**64 - 1, True, False],
             "keys": {7: "int", True: "bool", None: "none", "q\"u\\o\nte\x01": "ctl", "ünï😀": "utf-8"},
             "a.b": np.arange(3, dtype=np.int16), "a": {"b": np.arange(2, dtype=np.int16)},
             "bytes": bytearray(b"\x00\xff"), "tuple": (np.float32(2.5), ())}
    with outboard.Checkpointer(tmp_path) as ck:
        ck.save(1, state)
        loaded = ck.load()
    state["bytes"] = bytes(state["bytes"])  # bytes-like comes back as bytes
    assert_same(state, loaded)
    assert [type(v) for v in loaded["floats"]] == [float] * 8 and str(loaded["floats"][1]) == "-0.0"
    assert [type(v) for v in loaded["ints"]] == [int] * 5 + [bool] * 2
    from safetensors.numpy import load_file
    assert sorted(load_file(str(tmp_path / "step-000000000001" / "tensors.safetensors"))) == [
        "a.b", "a.b#1", "tuple.0"]


def test_states_that_cannot_be_saved_are_refused_naming_the_item(tmp_path: Path) -> None:
    looped: list = []
    looped.append(looped)
    deep: list = []
    for _ in range(300):
        deep = [deep]
    with outboard.Checkpointer(tmp_path) as ck:
        for state, message in [
            ({"m": {"w": object()}}, r"state item 'm\.w': a object is not a tensor"),
            ({"m": {(1, 2): 3}}, r"state item 'm': key \(1, 2\) is not str, int, bool or None"),
            ({"c": np.zeros(2, np.complex64)}, r"state item 'c': numpy dtype complex64 has no safetensors"),
            ({"big": [2**64]}, r"state item 'big\.0': an int of 65 bits is outside the 64-bit range"),
            ({"s": "\ud800"}, r"state item 's': a str that is not valid Unicode"),
            ({"loop": looped}, r"nested deeper than 256 containers"),
            ({"deep": deep}, r"nested deeper than 256 containers"),
        ]:
            with pytest.raises(InvalidArgument, match=message):
                ck.save(1, state)
        assert ck.save(2, make_state(2))  # a refused state took nothing with it
        assert_same(make_state(2), ck.load())
        assert ck.status().persisted == 1


def test_load_holds_each_tensor_once(tmp_path: Path) -> None:
    weights = np.random.default_rng(0).standard_normal(8 << 20, dtype=np.float32)  # 32 MiB
    with outboard.Checkpointer(tmp_path) as ck:
        ck.save(1, {"w": weights, "step": 1})
        ck.wait()
    tracemalloc.start()
    try:
        loaded = outboard.checkpoint.load(tmp_path).state
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(loaded["w"], weights) and loaded["w"].flags.writeable
    assert peak < 1.25 * weights.nbytes, f"load() peaked at {peak} B of Python memory for {weights.nbytes} B of tensors"


def test_keep_last_prunes_the_oldest(tmp_path: Path) -> None:
    with outboard.Checkpointer(tmp_path, keep_last=2) as ck:
        for step in range(5):
            ck.save(step, make_state(step))
            ck.wait()
    assert steps_on_disk(tmp_path) == [3, 4]
    assert_same(make_state(3), checkpoint.load(tmp_path, 3).state)


def test_skip_drops_saves_while_one_persists_and_queue_one_keeps_the_newest(tmp_path: Path) -> None:
    big = make_state(1, mb=24)
    with outboard.Checkpointer(tmp_path / "skip", policy="skip", keep_last=0) as ck:
        taken = [ck.save(step, big) for step in range(6)]
        ck.wait()
        s = ck.status()
    assert taken[0] and not all(taken), "a save made while the last one persisted was not skipped"
    assert s.skipped == taken.count(False) and s.skipped_steps == [i for i, t in enumerate(taken) if not t]
    assert steps_on_disk(tmp_path / "skip") == [i for i, t in enumerate(taken) if t]

    states = [make_state(step, mb=16) for step in range(6)]
    with outboard.Checkpointer(tmp_path / "queue", policy="queue-one", keep_last=0) as ck:
        for step in range(6):
            assert ck.save(step, states[step])
        ck.wait()
        s = ck.status()
    on_disk = steps_on_disk(tmp_path / "queue")
    assert s.superseded >= 1 and len(on_disk) == 6 - s.superseded and on_disk[-1] == 5
    for step in on_disk:
        assert_same(states[step], checkpoint.load(tmp_path / "queue", step).state)


def test_block_with_fixed_staging_refuses_a_state_that_does_not_fit(tmp_path: Path) -> None:
    with outboard.Checkpointer(tmp_path, staging_bytes=1 << 20) as ck:
        ck.save(0, make_state(0))
        with pytest.raises(TooBig, match=r"staging_bytes 1048576 B"):
            ck.save(1, make_state(1, mb=2))
        ck.save(2, make_state(2))
    assert steps_on_disk(tmp_path) == [0, 2]


def test_damaged_checkpoints_are_skipped_and_named(tmp_path: Path) -> None:
    with outboard.Checkpointer(tmp_path, keep_last=0) as ck:
        for step in range(4):
            ck.save(step, make_state(step))
    tensors = lambda s: tmp_path / f"step-{s:012d}" / "tensors.safetensors"  # noqa: E731
    data = bytearray(tensors(3).read_bytes())
    data[-3] ^= 0xFF
    tensors(3).write_bytes(bytes(data))                                   # tampered
    tensors(2).write_bytes(tensors(2).read_bytes()[:-100])                # truncated
    m = tmp_path / "step-000000000001" / "manifest.json"                  # a manifest that lies
    manifest = json.loads(m.read_text())
    manifest["files"]["tensors.safetensors"]["sha256"] = "0" * 64
    m.write_text(json.dumps(manifest))
    with pytest.warns(UserWarning) as caught:
        with outboard.Checkpointer(tmp_path) as ck:
            state = ck.load()
    assert_same(make_state(0), state)
    said = " ".join(str(w.message) for w in caught)
    assert "step 3" in said and "sha256 differs" in said and "step 2" in said and "the manifest says" in said
    assert "step 1" in said
    loaded = checkpoint.load(tmp_path)
    assert loaded.step == 0 and [s for s, _ in loaded.skipped] == [3, 2, 1]
    (tmp_path / "step-000000000000" / "manifest.json").unlink()
    with pytest.raises(NotFound, match=r"no intact checkpoint .*manifest.json is missing"):
        checkpoint.load(tmp_path)
    with pytest.raises(NotFound, match=r"no checkpoint of step 7"):
        checkpoint.load(tmp_path, 7)


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {r.stderr.strip()}")


def test_disk_full_surfaces_on_the_next_call_and_keeps_what_was_persisted(tmp_path: Path, start_agent) -> None:
    small = tmp_path / "small"
    _mount_tmpfs(small, "3m")
    try:
        # No free space held back: the write itself meets the full disk.
        agent = start_agent("--checkpoint-root", str(small), "--checkpoint-min-free-pct", "0")
        client = outboard.connect(agent.address)
        with outboard.Checkpointer(small, client, keep_last=0) as ck:
            ck.save(0, make_state(0, mb=1))
            ck.wait()
            ck.save(1, make_state(1, mb=2.5))
            with pytest.raises(IoError, match=r"checkpoint of step 1 failed: .*cannot write .*tensors.safetensors: "
                                              r"No space left on device"):
                ck.wait()
            assert ck.status().error and ck.status().last_persisted == 0
            assert steps_on_disk(small) == [0] and not list(small.glob(".tmp-*"))
            assert_same(make_state(0, mb=1), ck.load())
            ck.save(2, make_state(2, mb=0.5))  # room again: saving goes on
        client.close()
        assert steps_on_disk(small) == [0, 2]
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_a_save_over_a_disk_limit_is_refused_before_it_is_written(tmp_path: Path, start_agent) -> None:
    small = tmp_path / "small"
    _mount_tmpfs(small, "8m")
    try:
        agent = start_agent("--checkpoint-root", str(small), "--checkpoint-min-free-pct", "50",
                            "--checkpoint-max-dir-bytes", str(5 << 19))
        client = outboard.connect(agent.address)
        with outboard.Checkpointer(small / "a", client, keep_last=0) as ck:  # 2.5 MiB: two of 1 MiB, not three
            ck.save(0, make_state(0, mb=1))
            ck.save(1, make_state(1, mb=1))
            ck.save(2, make_state(2, mb=1))
            with pytest.raises(TooBig, match=r"checkpoint of step 2 failed: .*step-000000000002 takes at least \d+ B "
                                             r"and .*/a holds \d+ B, over --checkpoint-max-dir-bytes 2621440 B"):
                ck.wait()
        with outboard.Checkpointer(small / "b", client, keep_last=0) as ck:  # 4 of the 8 MiB stay free
            ck.save(0, make_state(0, mb=1))
            ck.save(1, make_state(1, mb=1.2))  # under the directory's limit, not the free space's
            with pytest.raises(TooBig, match=r"has \d+ B free, of which --checkpoint-min-free-pct keeps 50% "
                                             r"\(4194304 B\)"):
                ck.wait()
            ck.save(2, make_state(2, mb=0.5))  # one that fits: saving goes on
            ck.wait()
        client.close()
        assert steps_on_disk(small / "a") == [0, 1] and steps_on_disk(small / "b") == [0, 2]
        assert not list(small.glob("*/.tmp-*"))
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def _kill_tree(pid: int) -> None:
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    os.kill(pid, signal.SIGKILL)
    for c in children:
        try:
            os.kill(int(c), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_kill_9_of_the_agent_mid_write_leaves_the_newest_intact_checkpoint(tmp_path: Path) -> None:
    agent = outboard.LocalAgent("--checkpoint-root", str(tmp_path)).start()
    try:
        client = outboard.connect(agent.address)
        ck = outboard.Checkpointer(tmp_path / "run", client)
        ck.save(0, make_state(0))
        ck.wait()
        ck.save(1, make_state(1, mb=160))
        deadline = time.monotonic() + 20
        while not list((tmp_path / "run").glob(".tmp-*/tensors.safetensors")) and time.monotonic() < deadline:
            time.sleep(0.001)
        _kill_tree(agent.pid)
    finally:
        agent.stop()
    with pytest.raises(outboard.Error):
        ck.wait(timeout=10)
    ck.close()
    client.close()
    assert steps_on_disk(tmp_path / "run") in ([0], [0, 1])
    loaded = checkpoint.load(tmp_path / "run")
    assert_same(make_state(loaded.step, mb=0.01 if loaded.step == 0 else 160), loaded.state)
    # A new agent's checkpointer takes the directory over and clears what the dead one left.
    with outboard.Checkpointer(tmp_path / "run") as again:
        assert not list((tmp_path / "run").glob(".tmp-*"))
        again.save(2, make_state(2))
    assert checkpoint.load(tmp_path / "run").step == 2


TRAINER = textwrap.dedent("""
    import json, os, signal, sys
    import numpy as np
    import outboard
    sys.path.insert(0, sys.argv[3])
    from test_checkpoint import make_state
    client = outboard.connect(sys.argv[1], **json.loads(sys.argv[4]))
    ck = outboard.Checkpointer(sys.argv[2], client)
    ck.save(0, make_state(0))
    ck.wait()
    ck.save(1, make_state(1, mb=64))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def tls(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """Keys made by `outboard keys init`: the agent's options and a client's connect() arguments."""
    assert cli.main(["keys", "init", str(tmp_path / "k")]) == 0
    return ["--secure", "always", *agent_args(tmp_path, "k")], {"secure": "always", **certs(tmp_path, "client", "k")}


@pytest.mark.parametrize("secure", [False, True], ids=["plaintext", "tls"])
def test_a_trainer_killed_mid_save_leaves_an_intact_checkpoint_and_frees_the_directory(tmp_path: Path, start_agent,
                                                                                       secure: bool) -> None:
    # Over TLS the kill falls between pieces: the agent gives up the half-sent save. A TLS client's
    # "run" is in its own directory under the root.
    agent_args, connect_args = tls(tmp_path) if secure else ([], {})
    agent = start_agent("--checkpoint-root", str(tmp_path), *agent_args)
    run = "run" if secure else str(tmp_path / "run")
    r = subprocess.run([sys.executable, "-c", TRAINER, agent.address, run, str(Path(__file__).parent),
                        json.dumps(connect_args)], capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGKILL, r.stderr
    client = outboard.connect(agent.address, **connect_args)
    deadline = time.monotonic() + 10
    while True:  # the trainer's session lets the directory go once it sees the trainer gone
        try:
            ck = outboard.Checkpointer(run, client)
            break
        except BadState:
            assert time.monotonic() < deadline, "the dead trainer's lock was never released"
            time.sleep(0.05)
    loaded = checkpoint.load(ck.dir)
    assert loaded.step in (0, 1) and not loaded.skipped
    assert_same(make_state(loaded.step, mb=0.01 if loaded.step == 0 else 64), loaded.state)
    ck.close()
    client.close()


def test_two_trainers_on_one_agent_never_mix_and_cannot_leave_the_root(tmp_path: Path, start_agent) -> None:
    root = tmp_path / "root"
    root.mkdir()
    agent = start_agent("--checkpoint-root", str(root))
    a = outboard.connect(agent.address, session="new")
    b = outboard.connect(agent.address, session="new")
    ca = outboard.Checkpointer(root / "a", a, keep_last=0)
    cb = outboard.Checkpointer(root / "b", b, keep_last=0)
    for step in range(3):
        ca.save(step, make_state(step))
        cb.save(step, make_state(100 + step))
    ca.wait()
    cb.wait()
    with pytest.raises(BadState, match=r"in use by another checkpointer"):
        outboard.Checkpointer(root / "a", b)
    with pytest.raises(InvalidArgument, match=r"not inside the agent's --checkpoint-root"):
        outboard.Checkpointer(tmp_path / "elsewhere", b)
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(InvalidArgument, match=r"is a link or not a directory"):
        outboard.Checkpointer(root / "link" / "x", b)
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "x").exists()
    ca.close()
    cb.close()
    for step in range(3):
        assert_same(make_state(step), checkpoint.load(root / "a", step).state)
        assert_same(make_state(100 + step), checkpoint.load(root / "b", step).state)
    a.close()
    b.close()


def test_an_agent_that_does_not_map_the_staging_reads_it_with_one_sided_gets(tmp_path: Path, start_agent) -> None:
    # As a remote agent does: the state (20 MiB, three of the agent's 8 MiB pieces) is fetched by UCX.
    agent = start_agent("--checkpoint-root", str(tmp_path), "--map-peer-regions=false")
    states = [make_state(seed, mb=20) for seed in (1, 2)]
    with outboard.connect(agent.address) as client, outboard.Checkpointer(tmp_path, client, keep_last=0) as ck:
        for step, state in enumerate(states):
            ck.save(step, state)
        ck.wait()
        assert ck.status().bytes > 20 << 20
    for step, state in enumerate(states):
        assert_same(state, checkpoint.load(tmp_path, step).state)


def test_over_tls_the_snapshot_goes_in_sealed_pieces_and_loads_back(tmp_path: Path, start_agent) -> None:
    # The agent cannot read a TLS client's staging: 20 MiB states go in 4 MiB pieces, then a state of
    # another shape, then one over the directory's limit, refused before a piece is written.
    agent_args, connect_args = tls(tmp_path)
    agent = start_agent("--checkpoint-root", str(tmp_path), "--checkpoint-max-dir-bytes", str(50 << 20), *agent_args)
    states = [make_state(seed, mb=20) for seed in (1, 2)] + [make_state(3)]
    with outboard.connect(agent.address, **connect_args) as client:
        assert client.connection.security.startswith("TLS 1.3")
        with outboard.Checkpointer("run", client, keep_last=0) as ck:
            run = ck.dir
            assert run.parent.parent == tmp_path / "tenants" and run.name == "run"
            for step, state in enumerate(states):
                ck.save(step, state)
            ck.wait()
            assert ck.status().total_bytes > 40 << 20
            ck.save(3, make_state(4, mb=20))
            with pytest.raises(TooBig, match=r"checkpoint of step 3 failed: .*step-000000000003 takes at least \d+ B "
                                             r"and .*/run holds \d+ B, over --checkpoint-max-dir-bytes"):
                ck.wait()
            ck.save(4, states[2])  # the connection and the directory still work
        assert client.request("echo", b"still here") == b"still here"
    assert steps_on_disk(run) == [0, 1, 2, 4] and not list(run.glob(".tmp-*"))
    for step, state in enumerate(states):
        assert_same(state, checkpoint.load(run, step).state)


def test_a_checkpoint_loads_through_the_agent_as_it_does_from_its_disk(tmp_path: Path, start_agent,
                                                                      monkeypatch) -> None:
    # As a trainer whose filesystem is not the agent's does (over TLS, as a remote agent is reached),
    # with no temporary directory to put the files in: they stream into the tensors.
    agent_args, connect_args = tls(tmp_path)
    agent = start_agent("--checkpoint-root", str(tmp_path), *agent_args)
    sizes = {1: 0.01, 2: 10, 3: 0.01}  # step 2's tensors take three reads
    client = outboard.connect(agent.address, **connect_args)
    ck = outboard.Checkpointer("run", client, keep_last=0)
    for step, mb in sizes.items():
        ck.save(step, make_state(step, mb=mb))
    ck.wait()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "absent"))
    assert ck._steps(through_agent=True) == [1, 2, 3] and ck.latest() == 3
    assert_same(make_state(2, mb=10), ck.load(2, through_agent=True))
    assert_same(make_state(3), ck.load(through_agent=True))
    # Damaged on the agent's disk: skipped, and named where it lies.
    tensors = ck.dir / "step-000000000003" / checkpoint.TENSORS_FILE
    data = bytearray(tensors.read_bytes())
    data[-1] ^= 1
    tensors.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"step 3 skipped: .*/run \(on the agent\)/step-000000000003/"
                                         r"tensors.safetensors: sha256 differs"):
        assert_same(make_state(2, mb=10), ck.load(through_agent=True))
    (ck.dir / "step-000000000002" / checkpoint.MANIFEST_FILE).unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same(make_state(1), ck.load(through_agent=True))
    assert [str(w.message).split(":")[0] for w in caught] == ["checkpoint step 3 skipped", "checkpoint step 2 skipped"]
    assert str(caught[1].message).endswith("(on the agent)/step-000000000002/manifest.json is missing")
    # A header that its manifest's sha256 vouches for, but that is not one safetensors reads.
    files = {name: ck.dir / "step-000000000001" / name for name in (checkpoint.TENSORS_FILE, checkpoint.MANIFEST_FILE)}
    intact = {name: f.read_bytes() for name, f in files.items()}
    data = bytearray(intact[checkpoint.TENSORS_FILE])
    data[8] = ord("[")
    manifest = json.loads(intact[checkpoint.MANIFEST_FILE])
    manifest["files"][checkpoint.TENSORS_FILE]["sha256"] = hashlib.sha256(data).hexdigest()
    files[checkpoint.TENSORS_FILE].write_bytes(bytes(data))
    files[checkpoint.MANIFEST_FILE].write_bytes(json.dumps(manifest).encode())
    with pytest.raises(NotFound, match=r"step 1: .*/run \(on the agent\)/step-000000000001/tensors.safetensors: "
                                       r"its header is not JSON"):
        ck.load(1, through_agent=True)
    for name, f in files.items():
        f.write_bytes(intact[name])
    with pytest.raises(NotFound, match=r"no checkpoint of step 9 in .*/run \(on the agent\)"):
        ck.load(9, through_agent=True)

    def read(handle: int, step: int, file: int, offset: int, length: int) -> bytes:
        return client.request("checkpoint", struct.pack("<BBIQBQI", checkpoint._VERSION, 5, handle, step, file, offset, length))

    assert struct.unpack_from("<Q", read(0, 1, 1, 1 << 40, 16))[0] > 0  # past the end: the size, no bytes
    for args, error, message in [((0, 9, 0, 0, 16), NotFound, r"step-000000000009/tensors.safetensors is missing"),
                                 ((0, 1, 2, 0, 16), InvalidArgument, r"unknown file 2"),
                                 ((0, 1, 0, 0, 0), InvalidArgument, r"a read takes 1 to kMaxPieceBytes"),
                                 ((0, 1, 0, 0, (8 << 20) + 1), InvalidArgument, r"a read takes 1 to kMaxPieceBytes"),
                                 ((7, 1, 0, 0, 16), NotFound, r"directory 7 is not open")]:
        with pytest.raises(error, match=message):
            read(*args)
    # Which way load() goes by itself: from the disk here, where the directory's lock file holds the
    # token the agent wrote; through the agent once it does not (as another host's directory at that path).
    fetched, fetch = [], ck._read_through
    ck._read_through = lambda step, *args: fetched.append(step) or fetch(step, *args)  # observes; fakes nothing
    lock = ck.dir / checkpoint.LOCK_FILE
    token = lock.read_bytes()
    assert len(token) == 32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same(make_state(1), ck.load())
        assert fetched == []
        lock.write_bytes(b"0" * 32)
        assert_same(make_state(1), ck.load())
        assert fetched == [3, 2, 1]
    lock.write_bytes(token)
    ck.close()
    with pytest.raises(BadState, match=r"no longer open on the agent"):
        ck.load(through_agent=True)
    assert_same(make_state(1), checkpoint.load(ck.dir).state)  # from the disk, as ever
    client.close()


def stream(data: bytes, piece: int = 3, *, sha256: str | None = None, pt: bool = False) -> dict:
    """The tensors of safetensors file ``data``, fed to the through-agent load's sink in pieces."""
    info = {"bytes": len(data), "sha256": sha256 or hashlib.sha256(data).hexdigest()}
    with checkpoint._TensorSink(Path("run/tensors.safetensors"), info, pt) as sink:
        for at in range(0, len(data), piece):
            sink.write(memoryview(data)[at:at + piece])
        return sink.finish()


@pytest.mark.parametrize("piece", [1, 7, 100, 1 << 20])
def test_a_streamed_safetensors_file_gives_what_safetensors_reads(piece: int) -> None:
    # The reference writer's bytes, in pieces that split the header's length, its text and the tensors.
    from safetensors.numpy import load, save
    rng = np.random.default_rng(piece)
    tensors = {"w": rng.standard_normal((33, 5)).astype(np.float32), "empty": np.zeros((0, 2), np.int64),
               "scalar": np.array(-7, np.int16), "flags": rng.integers(0, 2, 9).astype(np.bool_),
               "half": rng.standard_normal(11).astype(np.float16), "u64": rng.integers(0, 1 << 62, 4, np.uint64)}
    data = save(tensors, metadata={"step": "3"})
    got, want = stream(data, piece), load(data)
    assert sorted(got) == sorted(want)
    for name, t in want.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape and np.array_equal(got[name], t), name
        assert got[name].flags.writeable
    assert len({id(t.base) for t in got.values()}) == len(got)  # each tensor its own memory, as safetensors gives


def test_a_streamed_safetensors_file_of_torch_tensors_gives_what_safetensors_reads(monkeypatch) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install outboard[torch])")
    from safetensors.torch import load, save
    tensors = {"w": torch.randn(17, 3), "bf16": torch.randn(5).to(torch.bfloat16), "i8": torch.arange(-4, 4, dtype=torch.int8),
               "empty": torch.zeros(0, 4), "scalar": torch.tensor(3.5, dtype=torch.float64)}
    data = save(tensors)
    got, want = stream(data, 5, pt=True), load(data)
    assert sorted(got) == sorted(want)
    for name, t in want.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape and torch.equal(got[name], t), name
    monkeypatch.setitem(sys.modules, "torch", None)  # as where torch is not installed
    with pytest.raises(NotFound, match=r"run/tensors.safetensors holds torch tensors: reading them needs torch"):
        stream(data, pt=True)


def test_a_streamed_safetensors_file_mutated_at_random_loads_equal_or_is_named_damaged() -> None:
    # The header parser's fuzz: bytes flipped, inserted, cut or made JSON of their own, each file
    # vouched for by its sha256, so that only the parser judges it. Nothing else may escape.
    from safetensors.numpy import save
    rng = np.random.default_rng(7)
    good = save({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros((0,), np.int8),
                 "c": np.ones(5, np.float64)}, metadata={"k": "v"})
    (length,) = struct.unpack_from("<Q", good)
    text = good[8:8 + length]
    mutations = [lambda b, i=i: b[:i] + bytes([b[i] ^ int(rng.integers(1, 256))]) + b[i + 1:]
                 for i in rng.integers(0, 8 + length, 400)]
    mutations += [lambda b, n=n: struct.pack("<Q", n) + b[8:] for n in (0, 1, length - 1, length + 1, 1 << 63)]
    mutations += [lambda b, t=t: struct.pack("<Q", len(t)) + t + b[8 + length:]
                  for t in (b"[" * 100000 + b"]" * 100000, b'{"a": 1}', b'{"a": {"dtype": "F32", "shape": [1e9]}}',
                            text.replace(b"F32", b"F64"), text.replace(b"[2,3]", b"[2,4]"), text.replace(b"[40,64]", b"[64,40]"),
                            text.replace(b'"b"', b'"a"'), b"\xff\xfe", b" " * 64)]
    damaged = 0
    for mutate in mutations:
        data = mutate(good)
        try:
            got = stream(data, 11)
        except checkpoint.Damaged as e:
            damaged += 1
            assert e.message.startswith("run/tensors.safetensors: ")
            continue
        # A flip the header may take (in a name, the metadata, a space): the tensors still cover the data.
        assert len(got) == 3 and sum(t.nbytes for t in got.values()) == 64
    assert damaged > len(mutations) // 2


def test_a_streamed_safetensors_header_is_checked_and_named() -> None:
    def file(header: object, data: bytes = b"") -> bytes:
        text = header if isinstance(header, bytes) else json.dumps(header).encode()
        return struct.pack("<Q", len(text)) + text + data

    def f32(shape: list, begin: int, end: int) -> dict:
        return {"dtype": "F32", "shape": shape, "data_offsets": [begin, end]}

    for data, message in [
        (b"\x05\0\0", r"its 3 B hold no header length"),
        (struct.pack("<Q", 1 << 40) + b"{}", r"its header of 1099511627776 B does not fit its 10 B"),
        (file(b"{nope"), r"its header is not JSON"),
        (file([1, 2]), r"its header is not a JSON object"),
        (file({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, bytes(4)), r"tensor 'a' is described oddly"),
        (file({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, bytes(1)),
         r"tensor 'a' has dtype 'F8_E4M3', which numpy does not read here"),
        (file({"a": f32([2], 0, 4)}, bytes(4)), r"tensor 'a' spans \[0, 4\] for the 8 B of F32 \[2\]"),
        (file({"a": f32([2], 0, 8), "b": f32([1], 12, 16)}, bytes(16)), r"tensor 'b' begins at 12 B of the data where 8 B"),
        (file({"a": f32([1], 0, 4), "b": f32([1], 0, 4)}, bytes(4)), r"tensor 'b' begins at 0 B of the data where 4 B"),
        (file({"a": f32([1], 0, 4)}, bytes(8)), r"its tensors take 4 B of its 8 B of data"),
    ]:
        with pytest.raises(checkpoint.Damaged, match=r": run/tensors.safetensors: " + message):
            stream(data)
        # A file that is not the one its manifest lists is named so, whatever else is wrong with it.
        with pytest.raises(checkpoint.Damaged, match=r": run/tensors.safetensors: sha256 differs from the manifest.s$"):
            stream(data, sha256="0" * 64)
    assert list(stream(file({"__metadata__": {"k": "v"}, "a": f32([], 0, 4)}, struct.pack("<f", 2.5)))) == ["a"]


def test_tls_tenants_checkpoint_into_their_own_directories_only(tmp_path: Path, start_agent) -> None:
    # Two tenants name the same "run": each gets its own, and neither reaches the other's by path.
    # Each holds at most 1 MiB of checkpoints, in all its directories.
    tenants(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    agent = start_agent("--checkpoint-root", str(root), "--secure", "always", *agent_args(tmp_path, "k"),
                        "--checkpoint-max-client-bytes", "1MiB")
    a, b = (outboard.connect(agent.address, secure="always", **certs(tmp_path, t, "k")) for t in ("tenant1", "tenant2"))
    cka, ckb = outboard.Checkpointer("run", a, keep_last=1), outboard.Checkpointer("run", b, keep_last=1)
    assert cka.dir.parent.name.startswith("O=outboard_CN=tenant1-") and cka.dir.parent.parent == root / "tenants"
    assert ckb.dir.parent.name.startswith("O=outboard_CN=tenant2-") and cka.dir != ckb.dir
    cka.save(1, make_state(1))
    ckb.save(1, make_state(2))
    cka.wait()
    ckb.wait()
    cka.close()  # tenant1's directory is free: still out of tenant2's reach
    for where in (str(cka.dir), f"../{cka.dir.parent.name}/run", str(root / "run")):
        with pytest.raises(InvalidArgument, match=r"is not inside this client's own directory .*/tenants/"
                                                  r"O=outboard_CN=tenant2-[0-9a-f]{16} \(its TLS identity's"):
            outboard.Checkpointer(where, b)
    ckb.save(2, make_state(3))  # keep_last=1 prunes tenant2's step 1, never tenant1's
    ckb.close()
    assert steps_on_disk(cka.dir) == [1] and steps_on_disk(ckb.dir) == [2]
    assert_same(make_state(1), checkpoint.load(cka.dir).state)
    with outboard.Checkpointer("more/runs", a, keep_last=0) as more:  # tenant1's quota spans its directories
        more.save(1, make_state(4, mb=0.6))
        more.wait()
        more.save(2, make_state(5, mb=0.6))
        with pytest.raises(TooBig, match=r"this client's directories under .*/tenants/O=outboard_CN=tenant1-[0-9a-f]{16} "
                                         r"hold \d+ B \(with the checkpoints being written\), over "
                                         r"--checkpoint-max-client-bytes 1048576 B"):
            more.wait()
    with outboard.Checkpointer("run", b, keep_last=0) as ckb:  # tenant2's is its own
        ckb.save(3, make_state(6, mb=0.6))
    assert steps_on_disk(ckb.dir) == [2, 3]
    a.close()
    b.close()


def test_hostile_requests_fail_alone(tmp_path: Path, start_agent) -> None:
    agent = start_agent("--checkpoint-root", str(tmp_path))
    client = outboard.connect(agent.address)
    ck = outboard.Checkpointer(tmp_path / "run", client)
    region = client.connection.allocate_memory(4096)

    def save(tensors: bytes, count: int, handle: int = 0, state: bytes = b"null") -> bytes:
        d = region.descriptor
        return (struct.pack("<BBIQI", checkpoint._VERSION, 1, handle, 5, len(d)) + d + struct.pack("<I", count) + tensors
                + struct.pack("<I", len(state)) + state)

    def tensor(name: bytes, dims: tuple[int, ...], offset: int, nbytes: int, dtype: int = 9) -> bytes:
        return (struct.pack("<I", len(name)) + name + struct.pack("<BB", dtype, len(dims))
                + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<QQ", offset, nbytes))

    cases = [
        (b"\x01", InvalidArgument, r"truncated"),
        (b"\x07\x00", InvalidArgument, r"wire version 7"),
        (save(b"", 0, handle=9), NotFound, r"directory 9 is not open"),
        (save(tensor(b"w", (1024,), 4096, 4096), 1), OutOfRange, r"tensor 'w' at 4096 \+ 4096 B lies outside"),
        (save(tensor(b"w", (3,), 0, 16), 1), InvalidArgument, r"not what its shape and dtype F32 make"),
        (save(tensor(b"w", (1,), 0, 4) * 2, 2), InvalidArgument, r"tensor name 'w' appears twice"),
        (save(tensor(b"w", (1 << 62, 8), 0, 0), 1), InvalidArgument, r"shape and dtype"),
        (save(b"", 1 << 30), InvalidArgument, r"exceed the limit"),
        (save(b"", 0, state=b"{nope"), InvalidArgument, r"not JSON"),
    ]
    for payload, error, message in cases:
        with pytest.raises(error, match=message):
            client.request("checkpoint", payload)
    ck.save(1, make_state(1))  # the connection and the directory still work
    ck.wait()
    assert steps_on_disk(tmp_path / "run") == [1]
    ck.close()
    client.close()


def test_an_agent_without_a_checkpoint_root_refuses(agent) -> None:
    client = outboard.connect(agent.address)
    with pytest.raises(BadConfig, match=r"started without --checkpoint-root"):
        outboard.Checkpointer(tempfile.gettempdir(), client)
    client.close()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_thousand_small_saves_do_not_grow_memory() -> None:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    d = Path(tempfile.mkdtemp(dir=base, prefix="outboard-ck-"))
    try:
        with outboard.Checkpointer(d, keep_last=2) as ck:
            sessions = lambda: [int(p) for p in subprocess.run(  # noqa: E731
                ["pgrep", "-P", str(ck.client.agent.pid)], capture_output=True, text=True).stdout.split()]
            rss = {}
            for step in range(1000):
                ck.save(step, make_state(step % 7))
                if step in (199, 999):
                    ck.wait()
                    rss[step] = [_rss_kb(os.getpid())] + [_rss_kb(p) for p in sessions()]
        assert steps_on_disk(d) == [998, 999]
        grew = [b - a for a, b in zip(rss[199], rss[999])]
        assert max(grew) < 4096, f"RSS grew by {grew} KiB (trainer, agent sessions) from save 200 to 1000"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_torch_state_dicts_round_trip(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install outboard[torch])")
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 8)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "half": torch.ones(3, dtype=torch.bfloat16),
             "transposed": torch.arange(6.0).reshape(2, 3).T, "param": next(model.parameters()),
             "empty": torch.zeros(0, 4), "negative": torch._neg_view(torch.arange(3.0))}
    with outboard.Checkpointer(tmp_path) as ck:
        ck.save(1, state)
        loads = [ck.load(), ck.load(through_agent=True)]  # from the disk here, and streamed by the agent
    for back in loads:
        for k, v in state["model"].items():
            assert torch.equal(v, back["model"][k])
        assert torch.equal(back["half"], state["half"]) and back["half"].dtype == torch.bfloat16
        for k in ("transposed", "param", "empty", "negative"):
            assert torch.equal(back[k], state[k].detach()), k
        assert back["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
        for k, v in state["optimizer"]["state"].items():
            for name, t in v.items():
                assert torch.equal(t, back["optimizer"]["state"][k][name])
    from safetensors.torch import load_file
    assert torch.equal(load_file(str(tmp_path / "step-000000000001" / "tensors.safetensors"))["model.0.weight"],
                       state["model"]["0.weight"])


def test_gpu_tensors_are_copied_to_the_staging_and_load_back_to_their_device(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install outboard[torch])")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: GPU tensors are copied device-to-host into the staging, untested")
    state = {"w": torch.randn(1000, 100, device="cuda"), "t": torch.randn(8, 8, device="cuda").T,
             "cpu": torch.arange(5)}
    with outboard.Checkpointer(tmp_path) as ck:
        ck.save(1, state)
        back, on_cpu = ck.load(), ck.load(map_location="cpu")
    for k, v in state.items():
        assert back[k].device == v.device and torch.equal(back[k], v), k
        assert on_cpu[k].device.type == "cpu" and torch.equal(on_cpu[k], v.cpu()), k
