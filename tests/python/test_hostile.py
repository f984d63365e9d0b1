"""Hostile clients against real agents: bytes on the listening port, forged descriptors, other
clients' memory, paths. Each attack harms at most the attacker's own connection (or session):
the agent keeps serving, a well-behaved client alongside is answered within its deadline
throughout, and nothing is left behind."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import outboard
from outboard import errors

GOOD_DEADLINE_S = 2.0
#: The bootstrap's magic ("OBB1") and version (src/channel/bootstrap.h).
BOOT_MAGIC, BOOT_VERSION = 0x3142424F, 3


# ------------------------------------------------------------------ helpers


def children(pid: int) -> list[int]:
    """The agent's session processes."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def tcp_sockets() -> list[tuple[str, int, str]]:
    """(local address, inode, state) of every IPv4/IPv6 TCP socket of this network namespace."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            out.append((f[1], int(f[9]), f[3]))
    return out


def hex_ip(addr: str) -> str:
    """'0100007F:1F90' -> '127.0.0.1' (IPv4 only; IPv6 returned as is)."""
    ip = addr.split(":")[0]
    if len(ip) != 8:
        return ip
    return socket.inet_ntoa(struct.pack("<I", int(ip, 16)))


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(f[11]) + int(f[12])
    return total / os.sysconf("SC_CLK_TCK")


def sysv_segments() -> int:
    return len(Path("/proc/sysvipc/shm").read_text().splitlines()) - 1


def dev_shm() -> int:
    return len(os.listdir("/dev/shm"))


def maps(pid: int) -> int:
    return len(Path(f"/proc/{pid}/maps").read_text().splitlines())


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def raw(address: str, payload: bytes, *, close_write: bool = False, timeout: float = 3.0) -> bytes:
    """Sends `payload` on a plain TCP connection and returns what the agent sent before closing."""
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        s.sendall(payload)
        if close_write:
            s.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:  # closed with our junk unread: what came first is kept
                return got
            if not chunk:
                return got
            got += chunk
    finally:
        s.close()


def refusal_of(reply: bytes) -> tuple[int, str]:
    """(code, message) of a bootstrap refusal."""
    magic, kind, version, _, length = struct.unpack_from("<IBBHI", reply)
    assert (magic, kind, version) == (BOOT_MAGIC, 3, BOOT_VERSION), reply[:16]
    code, n = struct.unpack_from("<bI", reply, 12)
    return code, reply[17:17 + n].decode()


class Good:
    """A well-behaved client making requests throughout, each with its own deadline."""

    def __init__(self, address: str) -> None:
        self.client = outboard.connect(address, session="new")
        self.failures: list[str] = []
        self.slowest = 0.0
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            payload = os.urandom(64 + i % 4096)
            start = time.monotonic()
            try:
                if self.client.request("echo", payload, timeout=GOOD_DEADLINE_S) != payload:
                    self.failures.append(f"request {i}: echo differs")
            except errors.Error as e:
                self.failures.append(f"request {i}: {e}")
            self.slowest = max(self.slowest, time.monotonic() - start)
            self.count += 1
            i += 1
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()
        assert self.count > 0
        assert not self.failures, self.failures[:5]
        assert self.slowest < GOOD_DEADLINE_S


@pytest.fixture
def good(agent: outboard.LocalAgent) -> Iterator[Good]:
    g = Good(agent.address)
    yield g
    g.stop()


def run_client(address: str, script: str, *, env: dict[str, str] | None = None, user: int | None = None,
               timeout: float = 60, check: bool = True) -> dict[str, Any]:
    """Runs `script` (which defines `result`) in a client process of its own, as `user` if given;
    returns `result` (with `check=False`, {"exit": status} if the client died)."""
    python = sys.executable if user is None else python_for(user)
    prelude = (f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
               "import json, sys, outboard\nfrom outboard import errors\nADDRESS = sys.argv[1]\n")
    code = prelude + script + "\nprint(json.dumps(result))\n"
    preexec = (lambda: (os.setgid(user), os.setuid(user))) if user is not None else None
    p = subprocess.run([python, "-c", code, address], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})}, preexec_fn=preexec, cwd="/")
    if p.returncode != 0 and not check:
        return {"exit": p.returncode}
    assert p.returncode == 0, p.stderr[-3000:]
    # UCX logs to stdout too (a warning at exit, say): the result is the last JSON line.
    return json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])


# ---------------------------------------------------------------- the port


JUNK = {
    "17 zero bytes": bytes(17),
    "64 zero bytes": bytes(64),
    "2080 random bytes": random.Random(1).randbytes(2080),
    "4 KiB random": random.Random(2).randbytes(4096),
    "a header announcing 1 GiB": struct.pack("<IBBHI", BOOT_MAGIC, 1, BOOT_VERSION, 0, 1 << 30),
    "another version": struct.pack("<IBBHI", BOOT_MAGIC, 1, BOOT_VERSION + 7, 0, 4),
    "a welcome": struct.pack("<IBBHI", BOOT_MAGIC, 2, BOOT_VERSION, 0, 0),
    "a truncated hello": struct.pack("<IBBHI", BOOT_MAGIC, 1, BOOT_VERSION, 0, 40) + bytes(40),
    "an HTTP request": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
}


@pytest.mark.parametrize("what", list(JUNK))
def test_junk_on_the_listening_port_is_refused_and_closed(agent: outboard.LocalAgent, good: Good, what: str) -> None:
    reply = raw(agent.address, JUNK[what])
    if reply:  # refused with a reason, or closed at once
        code, message = refusal_of(reply)
        assert code in (errors.InvalidArgument.code, errors.TooBig.code), message
        print(f"{what}: {message}")


def test_floods_of_junk_leave_no_socket_no_fd_and_no_busy_loop(agent: outboard.LocalAgent, good: Good) -> None:
    # What killed or pinned the agent when UCX's connection manager took the port.
    baseline = fds(agent.pid)
    rng = random.Random(7)
    for i in range(60):
        size = rng.randrange(1024, 4097)
        try:
            raw(agent.address, bytes(size) if i % 2 else rng.randbytes(size), close_write=i % 3 == 0)
        except OSError:
            pass  # reset by the agent: what a refused peer may see
    for i in range(40):  # connect, close
        socket.create_connection(tuple(agent.address.rsplit(":", 1)[0:1]) + (int(agent.address.rsplit(":", 1)[1]),)).close()
    assert wait_for(lambda: fds(agent.pid) == baseline, 5), (fds(agent.pid), baseline)
    agent_sockets = socket_inodes(agent.pid)
    stuck = [s for s in tcp_sockets() if s[1] in agent_sockets and s[2] == "08"]  # CLOSE_WAIT
    assert not stuck, stuck
    pids = [agent.pid]
    before = cpu_seconds(pids)
    time.sleep(1.0)
    assert cpu_seconds(pids) - before < 0.05  # the listener idles


def test_silent_connections_time_out_and_their_number_is_capped(start_agent: Callable[..., outboard.LocalAgent]) -> None:
    agent = start_agent("--max-handshakes", "4", "--handshake-timeout-ms", "600")
    good = Good(agent.address)  # connected before the attack
    host, port = agent.address.rsplit(":", 1)
    silent = [socket.create_connection((host, int(port))) for _ in range(4)]
    time.sleep(0.1)
    code, message = refusal_of(raw(agent.address, b""))
    assert code == errors.Again.code
    assert message == "4 connections in their handshake reach 4 (agent option --max-handshakes)"
    with pytest.raises(errors.Again, match="--max-handshakes"):
        outboard.connect(agent.address, session="new")
    for s in silent:  # each is told why, then closed
        s.settimeout(3)
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
        assert refusal_of(reply) == (errors.TimedOut.code, "no hello within 600 ms (agent option --handshake-timeout-ms)")
        s.close()
    late = outboard.connect(agent.address, session="new")  # room again
    assert late.request("echo", b"x") == b"x"
    late.close()
    good.stop()


def test_connections_are_capped_agent_wide(start_agent: Callable[..., outboard.LocalAgent]) -> None:
    agent = start_agent("--max-connections", "3")
    clients = [outboard.connect(agent.address, session="new") for _ in range(3)]
    with pytest.raises(errors.Again, match=r"3 connections reach 3 \(agent option --max-connections\)"):
        outboard.connect(agent.address)
    clients.pop().close()
    assert wait_for(lambda: _connects(agent.address), 5)
    for c in clients:
        c.close()


def _connects(address: str) -> bool:
    try:
        outboard.connect(address, session="new").close()
        return True
    except errors.Again:
        return False


def test_agent_memory_for_clients_is_capped_across_sessions(start_agent: Callable[..., outboard.LocalAgent]) -> None:
    agent = start_agent("--max-memory", "1MiB")
    first = outboard.connect(agent.address, session="new")
    second = outboard.connect(agent.address, session="new")  # another session process
    first.request("memory", b"A" + struct.pack("<Q", 600 << 10))
    with pytest.raises(errors.NoMemory, match=r"memory region of 614400 B: the agent holds 614400 B of its "
                                              r"1048576 B for clients \(agent option --max-memory\)"):
        second.request("memory", b"A" + struct.pack("<Q", 600 << 10))
    first.request("memory", b"A" + struct.pack("<Q", 4096))  # the first's region gives its memory back
    second.request("memory", b"A" + struct.pack("<Q", 600 << 10))
    second.close()  # its session ends: what it held is free
    assert wait_for(lambda: _allocates(first, 1000 << 10), 5)
    first.close()


def test_a_session_holds_at_most_its_quota_and_so_cannot_starve_another(
        start_agent: Callable[..., outboard.LocalAgent]) -> None:
    agent = start_agent("--max-memory", "4MiB", "--max-session-memory", "1MiB")
    greedy = [outboard.connect(agent.address, session="ab" * 32) for _ in range(3)]  # one session, three connections
    other = outboard.connect(agent.address, session="new")
    greedy[0].request("memory", b"A" + struct.pack("<Q", 600 << 10))
    with pytest.raises(errors.NoMemory, match=r"memory region of 614400 B: this session holds 614400 B of its quota "
                                              r"of 1048576 B \(agent option --max-session-memory\)"):
        greedy[1].request("memory", b"A" + struct.pack("<Q", 600 << 10))
    greedy[2].request("memory", b"A" + struct.pack("<Q", 400 << 10))  # within the quota
    other.request("memory", b"A" + struct.pack("<Q", 1000 << 10))  # its own quota, untouched
    for c in [*greedy, other]:
        c.close()


def _allocates(c: outboard.Client, size: int) -> bool:
    try:
        c.request("memory", b"A" + struct.pack("<Q", size))
        return True
    except errors.NoMemory:
        return False


def test_the_agent_listens_on_its_address_only(agent: outboard.LocalAgent) -> None:
    clients = [outboard.connect(agent.address, session="new") for _ in range(2)]  # two session processes
    sessions = children(agent.pid)
    assert len(sessions) == 2
    ours = set().union(*(socket_inodes(p) for p in [agent.pid, *sessions]))
    listening = [(hex_ip(a), a) for a, inode, state in tcp_sockets() if inode in ours and state == "0A"]
    assert listening, "the agent listens nowhere"
    assert all(ip == "127.0.0.1" for ip, _ in listening), listening
    for c in clients:
        c.close()


def test_a_listen_address_wider_than_loopback_needs_keys_or_insecure() -> None:
    with pytest.raises(errors.BadConfig, match="--insecure"):
        outboard.LocalAgent(listen="0.0.0.0:0").start()


# ---------------------------------------------------------- descriptors


# The forged descriptor: a header, then a packed key that crashed ucp_ep_rkey_unpack.
FORGED = bytes.fromhex("4f42523140eee9455056000000100000000000004a0000000000005200000000")


# 'W' cookie, offset, length, seed; 'M' slot size, slots, pings, idle ms: then the descriptor.
@pytest.mark.parametrize("op,args", [("W", (0, 0, 8, 1)), ("M", (8, 1, 1, 10))])
def test_a_forged_descriptor_is_refused_and_the_connection_stays(client: outboard.Client, good: Good, op: str,
                                                                 args: tuple[int, ...]) -> None:
    assert client.request("memory", b"A" + struct.pack("<Q", 4096))
    with pytest.raises(errors.InvalidArgument, match="region descriptor"):
        client.request("memory", op.encode() + struct.pack("<QQQQ", *args) + FORGED)
    assert client.request("echo", b"still here") == b"still here"


def test_flipped_bytes_of_a_real_descriptor_never_take_the_agent_down(agent: outboard.LocalAgent, good: Good) -> None:
    # The attacker's own descriptor with 1-3 bits flipped, 200 times. A flip that leaves no key the
    # agent can check (a registered buffer's descriptor has none) makes the agent write through
    # UCX's messages to whatever address it names in the attacker's process, which may kill the
    # attacker: its own harm. The agent and everyone else carry on.
    outcome = run_client(agent.address, """
import random, struct
c = outboard.connect(ADDRESS)
region = c.connection.allocate_memory(4096)
descriptor = bytearray(region.descriptor)
rng = random.Random(11)
outcomes = {}
for _ in range(200):
    d = bytearray(descriptor)
    for _ in range(rng.randint(1, 3)):
        d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
    try:
        c.request("memory", b"W" + struct.pack("<QQQQ", 1, 0, 64, 3) + bytes(d))
        outcomes["written"] = outcomes.get("written", 0) + 1
    except errors.Error as e:
        outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1
    while True:
        try:
            c.receive(timeout=0.01)
        except errors.TimedOut:
            break
result = {"outcomes": outcomes, "open": c.connection.is_open}
""", check=False)
    print(outcome)
    fresh = outboard.connect(agent.address, session="new")
    assert fresh.request("echo", b"alive") == b"alive"
    fresh.close()


def test_a_client_cannot_have_the_agent_write_into_another_clients_memory(agent: outboard.LocalAgent) -> None:
    victim = outboard.connect(agent.address)
    region = victim.connection.allocate_memory(4096)
    region.array()[:] = 7
    attacker = run_client(agent.address, f"""
import struct
c = outboard.connect(ADDRESS)
try:
    c.request("memory", b"W" + struct.pack("<QQQQ", 1, 0, 64, 3) + bytes.fromhex("{region.descriptor.hex()}"))
    result = {{"written": True}}
except errors.Error as e:
    result = {{"error": type(e).__name__, "message": e.message}}
""")
    assert attacker.get("error") == "InvalidArgument", attacker
    assert "not to the client" in attacker["message"], attacker
    assert (region.array() == 7).all()
    victim.close()


def test_over_tcp_a_client_reads_nothing_of_another_clients_session(agent: outboard.LocalAgent) -> None:
    # A's region on the agent, its descriptor handed to B: over TCP, B's get reaches only B's own
    # session (its own process), never A's bytes. (On one host over shared memory the kernel lets a
    # process of the same user map the other's segments itself; see the README's security model.)
    tcp = {"UCX_TLS": "tcp"}
    a = subprocess.Popen([sys.executable, "-c", """
import json, struct, sys, outboard
c = outboard.connect(sys.argv[1])
d = c.request("memory", b"A" + struct.pack("<Q", 4096))
c.request("memory", b"P" + struct.pack("<Q", 99))
checksum = struct.unpack("<Q", c.request("memory", b"S" + struct.pack("<QQ", 0, 4096)))[0]
print(json.dumps({"descriptor": d.hex(), "lanes": c.connection.lanes, "checksum": checksum}), flush=True)
sys.stdin.readline()
print(json.dumps({"served": c.request("echo", b"a") == b"a"}), flush=True)
""", agent.address], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **tcp})
    assert a.stdin and a.stdout
    first = json.loads(a.stdout.readline())
    assert "tcp" in first["lanes"] and "posix" not in first["lanes"], first["lanes"]
    b = run_client(agent.address, f"""
c = outboard.connect(ADDRESS)
try:
    remote = c.connection.import_region(bytes.fromhex("{first['descriptor']}"))
    got = outboard._core.checksum(c.connection.get(remote, 0, 4096, 5.0))
except errors.Error as e:
    got = type(e).__name__
result = {{"got": got, "open": c.connection.is_open}}
""", env=tcp)
    assert b["got"] != first["checksum"], "B read A's bytes"
    a.stdin.write("\n")
    a.stdin.flush()
    assert json.loads(a.stdout.readline()) == {"served": True}
    a.wait(10)


def python_for(user: int) -> str:
    """An interpreter of this Python's version that `user` may run (this one may sit in root's
    home); the package is found through site.addsitedir."""
    for candidate in (sys.executable, f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"):
        try:
            p = subprocess.run([candidate, "-c", "import numpy"], capture_output=True,
                               preexec_fn=lambda: (os.setgid(user), os.setuid(user)),
                               env={**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}, cwd="/")
        except OSError:
            continue
        if p.returncode == 0:
            return candidate
    pytest.skip(f"no Python {sys.version_info.major}.{sys.version_info.minor} that uid {user} may run")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_a_client_of_another_user_gets_no_shared_memory(agent: outboard.LocalAgent) -> None:
    victim = outboard.connect(agent.address)
    descriptor = victim.request("memory", b"A" + struct.pack("<Q", 4096))
    victim.request("memory", b"P" + struct.pack("<Q", 5))
    other = run_client(agent.address, f"""
c = outboard.connect(ADDRESS)
try:
    remote = c.connection.import_region(bytes.fromhex("{descriptor.hex()}"))
    mapped = remote.mapped
except errors.Error as e:
    mapped = type(e).__name__
result = {{"lanes": c.connection.lanes, "mapped": mapped}}
""", user=65534, env={"HOME": "/tmp"})
    assert "tcp" in other["lanes"] and "posix" not in other["lanes"], other["lanes"]
    assert other["mapped"] is not True
    assert victim.request("echo", b"v") == b"v"
    victim.close()


# --------------------------------------------------------------- paths


@pytest.mark.parametrize("service", ["tokenize", "detokenize"])
def test_a_client_names_vocabularies_not_paths(client: outboard.Client, tmp_path: Path, service: str) -> None:
    secret = tmp_path / "x.tokenizer.json"
    secret.write_text('{"model": {"type": "TOPSECRET-42"}}')
    answers = []
    for name in (str(secret), str(tmp_path / "missing.tokenizer.json"), "../../etc/passwd", "gpt5"):
        with pytest.raises(errors.NotFound) as e:
            client.request(service, b"O" + name.encode())
        answers.append(e.value.message.replace(name, "NAME"))
        assert "TOPSECRET" not in e.value.message
    assert len(set(answers)) == 1, answers  # existing or not: the same answer


# -------------------------------------------------------------- errors


def test_errors_keep_their_type_whatever_bytes_they_quote(client: outboard.Client) -> None:
    with pytest.raises(errors.InvalidArgument, match=r"\\xff"):
        client.request("memory", b"\xff")
    with pytest.raises(errors.NotFound, match=r"\\xfe\\xff"):
        client.request("tokenize", b"O\xfe\xff")
    with pytest.raises(errors.InvalidArgument):
        client.request("graph", b"G\xff\xff\xff\xff\xff")


def test_bad_arguments_and_files_are_typed_errors(agent: outboard.LocalAgent, tmp_path: Path) -> None:
    taken = outboard.LocalAgent(listen=agent.address)
    with pytest.raises(errors.BadConfig, match=f"listen address {agent.address} is already in use"):
        taken.start()
    binary = tmp_path / "config.bin"
    binary.write_bytes(b"\xff\xfe\x00{")
    p = subprocess.run([str(Path(sys.executable).parent / "outboard"), "stats", "--agent", agent.address,
                        "--json", str(binary)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert f"--json file '{binary}' is not UTF-8 text (byte 0)" in p.stderr
    with outboard.connect(agent.address) as c:
        tok = c.tokenizer("gpt2")
        with pytest.raises(errors.InvalidArgument, match="max_len -1 is not in 0..4294967295"):
            tok.encode_batch(["hello"], max_len=-1)
        tok.close()


# --------------------------------------------------------------- leaks


def _lifetime_script(kill: bool) -> str:
    return f"""
import os, signal, struct
c = outboard.connect(ADDRESS)
c.request("memory", b"A" + struct.pack("<Q", 1 << 16))
r = c.connection.allocate_memory(1 << 16)
c.request("memory", b"W" + struct.pack("<QQQQ", 1, 0, 4096, 3) + r.descriptor)
c.receive(timeout=5)
if {kill}:
    os.kill(os.getpid(), signal.SIGKILL)
c.close()
result = {{}}
"""


def test_client_lifetimes_leave_nothing_behind(agent: outboard.LocalAgent) -> None:
    lifetimes = int(os.environ.get("OUTBOARD_TEST_LIFETIMES", "200"))
    warm = outboard.connect(agent.address, session="new")  # the agent's first session is made
    warm.close()
    assert wait_for(lambda: not children(agent.pid), 10)

    def snapshot() -> dict[str, int]:
        return {"sysv": sysv_segments(), "dev_shm": dev_shm(), "fds": fds(agent.pid), "maps": maps(agent.pid),
                "rss_kib": rss_kib(agent.pid)}

    before = snapshot()
    for i in range(lifetimes):
        kill = i % 3 == 2
        code = "import json, sys, outboard\nfrom outboard import errors\nADDRESS = sys.argv[1]\n" + _lifetime_script(kill)
        p = subprocess.run([sys.executable, "-c", code, agent.address], capture_output=True, text=True, timeout=60)
        assert p.returncode == (-signal.SIGKILL if kill else 0), p.stderr[-2000:]
    assert wait_for(lambda: not children(agent.pid), 10), children(agent.pid)
    after = snapshot()
    print(f"{lifetimes} client lifetimes: before {before}, after {after}")
    assert after["sysv"] <= before["sysv"] and after["dev_shm"] <= before["dev_shm"]
    assert after["fds"] == before["fds"] and after["maps"] == before["maps"]
    assert after["rss_kib"] < before["rss_kib"] + 2048
