"""Peer failure, shutdown and bad configuration: errors are prompt and clear."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

import outboard
from outboard import errors


def test_kill_9_of_agent_mid_stream_fails_client_within_1s(start_agent) -> None:
    agent = start_agent()
    c = outboard.connect(agent.address)
    outcome: dict[str, object] = {}
    started = threading.Event()

    def stream() -> None:
        try:
            i = 0
            while True:
                c.request("echo", os.urandom(1 + i % 60000), timeout=30)
                i += 1
                started.set()
        except errors.Error as e:
            outcome["error"] = e
            outcome["at"] = time.monotonic()

    t = threading.Thread(target=stream)
    t.start()
    assert started.wait(10)
    killed_at = time.monotonic()
    os.kill(agent.pid, signal.SIGKILL)
    t.join(10)
    assert not t.is_alive(), "client still waiting 10 s after the agent died"
    assert isinstance(outcome["error"], errors.ConnectionReset), outcome
    elapsed = outcome["at"] - killed_at
    print(f"client error {elapsed * 1000:.0f} ms after kill -9: {outcome['error']}")
    assert elapsed < 1.0
    with pytest.raises(errors.ConnectionReset):
        c.request("echo", b"after")
    c.close()


def test_sigterm_tells_clients_shut_down_and_exits_cleanly(start_agent) -> None:
    agent = start_agent()
    c = outboard.connect(agent.address)
    assert c.request("echo", b"hi") == b"hi"
    os.kill(agent.pid, signal.SIGTERM)
    assert agent.process.wait(5) == 0
    with pytest.raises(errors.ShutDown) as e:
        c.request("echo", b"late", timeout=5)
    assert "shutting down" in str(e.value)
    c.close()


def _run_agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([outboard.agent_executable(), *args], capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize(
    "doc, expected",
    [
        ({"listn": "127.0.0.1:0"}, "unknown key 'listn'"),
        ({"max-msg-size": [1]}, "key 'max-msg-size'"),
        ({"recv-window-msgs": "many"}, "key 'recv-window-msgs'"),
        ({"log-level": True}, "key 'log-level'"),
        ({"max-msg-size": "64 parsecs"}, "option 'max-msg-size'"),
        ({"tokenize-threads": -1}, "option 'tokenize-threads' is -1, expected 0..256"),
    ],
)
def test_bad_json_file_names_the_key(tmp_path, doc, expected) -> None:
    f = tmp_path / "agent.json"
    f.write_text(json.dumps(doc))
    r = _run_agent("--json", str(f))
    assert r.returncode == 2
    assert expected in r.stderr, r.stderr


def test_json_file_configures_agent_and_command_line_wins(tmp_path, start_agent) -> None:
    f = tmp_path / "agent.json"
    f.write_text(json.dumps({"doca_program_flags": {"max-msg-size": "8KiB"}, "log-level": 30}))
    agent = start_agent("--json", str(f))
    with outboard.connect(agent.address) as c:
        assert c.connection.peer_max_msg_size == 8192
    agent2 = start_agent("--json", str(f), "--max-msg-size", "16384")
    with outboard.connect(agent2.address) as c:
        assert c.connection.peer_max_msg_size == 16384


def test_malformed_json_file_is_an_error(tmp_path) -> None:
    f = tmp_path / "agent.json"
    f.write_text("{not json")
    r = _run_agent("--json", str(f))
    assert r.returncode == 2 and "is not valid JSON" in r.stderr and "line 1, column 3" in r.stderr, r.stderr


def test_debug_log_shows_shared_memory_lanes_with_microsecond_stamps(start_agent) -> None:
    agent = start_agent(log_level="debug")
    with outboard.connect(agent.address) as c:
        c.request("echo", b"x")
    agent.process.send_signal(signal.SIGTERM)
    agent.process.wait(5)
    log = agent.process.stderr.read().decode()
    assert "DEBUG [channel]" in log and "data endpoint" in log
    assert "sysv/memory" in log or "posix/memory" in log
    import re
    assert re.search(r"\d\d:\d\d:\d\d\.\d{6} ", log)


def test_connect_to_nothing_fails_fast() -> None:
    t0 = time.monotonic()
    with pytest.raises((errors.ConnectionReset, errors.TimedOut)):
        outboard.connect("127.0.0.1:1", connect_timeout=2)
    assert time.monotonic() - t0 < 3


def test_puts_into_a_killed_agents_mapped_region_fail_within_1s(start_agent) -> None:
    agent = start_agent()
    c = outboard.connect(agent.address)
    remote = c.connection.import_region(c.request("memory", b"A" + (4096).to_bytes(8, "little")))
    assert remote.mapped
    os.kill(agent.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    # The mapping outlives the agent: puts land in memory nobody reads until the failure is seen.
    with pytest.raises(errors.ConnectionReset):
        while time.monotonic() - killed_at < 5:
            c.connection.put(remote, 0, b"x" * 64, 1.0)
            c.connection.progress()
    assert time.monotonic() - killed_at < 1.0
    c.close()
