"""ucx_perftest (ucx-utils) as a peer: a server and a client process per cell, its CSV parsed.

Its latency tests report one-way time (RTT/2, libperf's factor 2) at the 50th percentile and
the average; its bandwidth tests report MB/s (MiB/s: it divides by 1024²) and messages/s.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: Seconds one ucx_perftest cell may take before both processes are killed.
CELL_TIMEOUT_S = 120.0
#: Seconds the server gets to start listening.
SERVER_READY_S = 10.0
#: Ports tried per cell: another process may take the free port we picked before the server binds it.
PORT_ATTEMPTS = 3


@dataclass(frozen=True)
class Result:
    iterations: int
    p50_us: float  # one-way for latency tests
    avg_us: float
    mib_s: float
    msg_per_s: float


def executable() -> str | None:
    return shutil.which("ucx_perftest")


def unavailable() -> str | None:
    """Why the peer cannot run here, or None."""
    return None if executable() else "ucx_perftest not found (Debian package ucx-utils; make run installs it)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _ServerExited(RuntimeError):
    pass


def listening(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on ``port``, from /proc: its network
    namespace's socket tables and its descriptors (``ss`` is not everywhere: the GPU machines lack it)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:  # sl local_address rem_address st ... inode
            f = row.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{f[9]}]")
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def _wait_listening(port: int, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + SERVER_READY_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise _ServerExited(f"ucx_perftest server on port {port} exited with status {server.returncode}: "
                                f"{server.stdout.read()[-500:] if server.stdout else ''}")
        # Its own socket: another process listening on the port would take our client. A prefix
        # (`ip netns exec NS`) execs the server in its place, so the pid is the server's.
        if listening(server.pid, port):
            return
        time.sleep(0.02)
    raise TimeoutError(f"ucx_perftest server not listening on port {port} within {SERVER_READY_S} s")


def parse_csv(output: str) -> Result:
    """The last CSV row of `ucx_perftest -f -v` (iterations, 50.0_percentile_lat, avg_lat, overall_lat,
    avg_bw, overall_bw, avg_mr, overall_mr)."""
    rows = [s for s in (line.strip() for line in output.splitlines()) if s[:1].isdigit() and s.count(",") >= 7]
    if not rows:
        raise ValueError(f"no result row in ucx_perftest output: {output[-500:]!r}")
    f = rows[-1].split(",")
    return Result(int(f[0]), float(f[1]), float(f[3]), float(f[5]), float(f[7]))


def run(test: str, size: int, iterations: int, *, env: dict[str, str] | None = None, server_core: int | None = None,
        client_core: int | None = None, server_prefix: Sequence[str] = (), client_prefix: Sequence[str] = (),
        host: str = "127.0.0.1", warmup: int | None = None) -> Result:
    """One cell: `test` (e.g. ucp_am_lat) with `size`-byte messages. `env` adds to the environment of both
    processes (UCX_TLS picks the transport); prefixes run them elsewhere (`ip netns exec NS`)."""
    exe = executable()
    if exe is None:
        raise FileNotFoundError(unavailable())
    full_env = {**os.environ, **(env or {})}
    server, port = _start_server([*server_prefix, exe] + (["-c", str(server_core)] if server_core is not None else []),
                                 full_env)
    client_cmd = [*client_prefix, exe, host, "-p", str(port), "-t", test, "-s", str(size), "-n", str(iterations),
                  "-f", "-v"]
    client_cmd += ["-c", str(client_core)] if client_core is not None else []
    client_cmd += ["-w", str(warmup)] if warmup is not None else []
    try:
        client = subprocess.run(client_cmd, env=full_env, capture_output=True, text=True, timeout=CELL_TIMEOUT_S)
        if client.returncode != 0:
            raise RuntimeError(f"ucx_perftest {test} -s {size} failed ({client.returncode}): {client.stderr[-500:]}")
        return parse_csv(client.stdout)
    finally:
        _stop(server)


def _start_server(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    """A listening server and its port. A server that exits first is retried on another port: between
    our picking a free port and its bind(), another process may take it ("Address already in use")."""
    attempts = PORT_ATTEMPTS
    while True:
        port = _free_port()
        server = subprocess.Popen([*cmd, "-p", str(port)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        try:
            _wait_listening(port, server)
        except BaseException as e:
            _stop(server)
            attempts -= 1
            if not isinstance(e, _ServerExited) or attempts == 0:
                raise
            continue
        return server, port


def _stop(server: subprocess.Popen[str]) -> None:
    if server.poll() is None:
        server.kill()
    server.wait()
    if server.stdout:
        server.stdout.close()
