"""Starting and stopping a local outboard-agent: the embedded default."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import BadConfig, NotFound, TimedOut

#: Seconds to wait for a started agent to print its address.
READY_TIMEOUT_S = 10.0
#: Seconds a stopping agent gets between SIGTERM and SIGKILL.
STOP_TIMEOUT_S = 5.0


def find_executable(name: str, env_var: str) -> str:
    """Path of one of our native programs: $ENV_VAR, beside this Python, or on PATH."""
    candidates = [
        os.environ.get(env_var),
        str(Path(sysconfig.get_path("scripts")) / name),
        str(Path(sys.executable).parent / name),
        shutil.which(name),
    ]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise NotFound(f"{name} executable not found (set {env_var} or run `make build`)")


def agent_executable() -> str:
    """Path of outboard-agent: $OUTBOARD_AGENT, beside this Python, or on PATH."""
    return find_executable("outboard-agent", "OUTBOARD_AGENT")


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child before exec: a parent killed with SIGKILL cannot stop
    # its agent, so the kernel does.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _stop_process(p: subprocess.Popen[bytes]) -> int:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p.stderr:
        p.stderr.close()
    return p.returncode


class LocalAgent:
    """An outboard-agent child process; stopped on exit, error or Ctrl-C.

    Use as a context manager::

        with LocalAgent() as agent:
            client = outboard.connect(agent.address)
    """

    def __init__(self, *args: str, log_level: str | None = None, listen: str = "127.0.0.1:0",
                 prefix: Sequence[str] = (), env: Mapping[str, str] | None = None) -> None:
        """``prefix`` runs the agent through another command (``ip netns exec NS``); ``env`` adds
        to its environment (UCX_TLS)."""
        self.args = list(args)
        if log_level is not None:
            self.args += ["--log-level", str(log_level)]
        self.listen, self.prefix, self.env = listen, list(prefix), dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.address = ""

    def start(self) -> LocalAgent:
        tmp = tempfile.mkdtemp(prefix="outboard-agent-")
        address_file = Path(tmp) / "address"
        cmd = [*self.prefix, agent_executable(), "--listen", self.listen, "--address-file", str(address_file),
               *self.args]
        self.process = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent,
            env={**os.environ, **self.env} if self.env else None,
        )
        # Stopped at garbage collection or interpreter exit even if nobody calls stop().
        self._finalizer = weakref.finalize(self, _stop_process, self.process)
        deadline = time.monotonic() + READY_TIMEOUT_S
        try:
            while not address_file.exists():
                if self.process.poll() is not None:
                    err = self.process.stderr.read().decode(errors="replace").strip() if self.process.stderr else ""
                    raise BadConfig(f"outboard-agent exited with status {self.process.returncode}: {err}")
                if time.monotonic() > deadline:
                    raise TimedOut(f"outboard-agent not ready within {READY_TIMEOUT_S} s")
                time.sleep(0.005)
            self.address = address_file.read_text().strip()
        except BaseException:
            self.stop()
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; returns the exit status."""
        if self.process is None:
            return None
        self._finalizer.detach()
        return _stop_process(self.process)

    def __enter__(self) -> LocalAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
