"""What the agent-based suites (channel, rdma) share: the agents they measure, benchmark client
processes (outboard.bench.worker) on a chosen transport, and ucx_perftest beside them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import LocalAgent
from .._agent import agent_executable
from . import child, netns
from .declare import Options
from .peers import ucx_perftest

#: UCX settings of the client (and peer) per transport; the agent keeps its own.
TRANSPORTS = {"shm": {}, "tcp": {"UCX_TLS": "tcp,self"}, "netns": {"UCX_TLS": "tcp,self"}}
#: Benchmark clients: numpy's OpenBLAS must not keep idle threads spinning beside the measurement.
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
#: Seconds a worker process may run.
WORKER_TIMEOUT_S = 300.0
#: The secure kind "openssl": certificates, with AES-256-GCM sealed by OpenSSL on both sides where the
#: build seals with ipsec-mb (the same AEAD and bytes: the side-by-side peer of the faster code).
SECURE_ENV = {"openssl": {"OUTBOARD_AEAD_ENGINE": "openssl"}}


@dataclass
class Env:
    options: Options
    stack: ExitStack
    address: str  # same-host agent
    embedded: bool  # we started it (peers are comparable only then)
    cores: tuple[int, int] | None  # (agent and peer server, client)
    lanes: dict[str, list[str]] = field(default_factory=dict)
    veth: netns.VethPair | None = None
    netns_address: str = ""
    keys: str = ""  # outboard-agent --keys-init's directory, made for the first secure cell
    secure_addresses: dict[tuple[str, str], str] = field(default_factory=dict)

    def agent_for(self, transport: str) -> str:
        if transport != "netns":
            return self.address
        if not self.netns_address:
            self.veth = self.stack.enter_context(netns.VethPair())
            # The veth address is not loopback: a client there is "remote".
            agent = LocalAgent(*_agent_args(self.cores), "--insecure", listen=f"{netns.SERVER_IP}:0",
                               prefix=self.veth.server,
                               env=TRANSPORTS["netns"], log_level=self.options.log_level)
            self.netns_address = self.stack.enter_context(agent).address
        return self.netns_address

    def client_keys(self, kind: str) -> dict[str, str]:
        """connect() arguments of a client of secure_agent_for(transport, kind); "openssl" is
        "certificates" (the difference is SECURE_ENV's, on both sides)."""
        if kind == "psk":
            return {"secure": "always", "psk_file": f"{self.keys}/psk.txt"}
        return {"secure": "always", "cert": f"{self.keys}/client.pem", "key": f"{self.keys}/client.key",
                "ca": f"{self.keys}/ca.pem"}

    def secure_agent_for(self, transport: str, kind: str) -> str:
        """An agent as agent_for()'s, with keys (kind: "certificates", "psk" or "openssl"): TLS 1.3
        and sealed frames for every client."""
        if (transport, kind) not in self.secure_addresses:
            if not self.keys:
                self.keys = os.path.join(self.stack.enter_context(tempfile.TemporaryDirectory(prefix="outboard-")),
                                         "keys")
                # The agent's certificate lists the address clients dial: loopback's, and the namespace's.
                subprocess.run([agent_executable(), "--keys-init", self.keys, "outboard agent", "--agent-host",
                                "127.0.0.1", "--agent-host", netns.SERVER_IP], check=True, capture_output=True)
            keys = (["--psk-file", f"{self.keys}/psk.txt"] if kind == "psk" else
                    ["--cert", f"{self.keys}/agent.pem", "--key", f"{self.keys}/agent.key", "--ca", f"{self.keys}/ca.pem"])
            args = [*_agent_args(self.cores), "--secure", "always", *keys]
            env = SECURE_ENV.get(kind, {})
            if transport == "netns":
                self.agent_for("netns")  # the namespaces
                assert self.veth is not None
                agent = LocalAgent(*args, listen=f"{netns.SERVER_IP}:0", prefix=self.veth.server,
                                   env={**TRANSPORTS["netns"], **env}, log_level=self.options.log_level)
            else:
                agent = LocalAgent(*args, env=env, log_level=self.options.log_level)
            self.secure_addresses[transport, kind] = self.stack.enter_context(agent).address
        return self.secure_addresses[transport, kind]


def _agent_args(cores: tuple[int, int] | None) -> list[str]:
    return ["--cores", str(cores[0])] if cores else []


def _cores() -> tuple[int, int] | None:
    cores = sorted(os.sched_getaffinity(0))
    return (cores[0], cores[1]) if len(cores) >= 2 else None


@contextmanager
def setup(options: Options) -> Iterator[Env]:
    with ExitStack() as stack:
        cores = _cores()
        if options.agent:
            yield Env(options, stack, options.agent, False, cores)
            return
        agent = stack.enter_context(LocalAgent(*_agent_args(cores), log_level=options.log_level))
        yield Env(options, stack, agent.address, True, cores)


def describe(env: Env) -> dict[str, Any]:
    return {"agent": "embedded local agent" if env.embedded else env.address, "pinned_cores": env.cores,
            "transports": {t: "+".join(dict.fromkeys(lanes)) for t, lanes in env.lanes.items()},
            "ucx_perftest": ucx_perftest.executable() or "missing"}


def workers(env: Env, transport: str, specs: list[dict[str, Any]],
            timeout: float = WORKER_TIMEOUT_S, secure: str = "") -> list[dict[str, Any]]:
    """Runs benchmark client processes (outboard.bench.worker) side by side on the transport; their
    results in order. Any failure raises, once every process has ended. ``secure`` ("certificates",
    "psk" or "openssl"): clients of an agent with such keys, through TLS."""
    if secure:
        address = env.secure_agent_for(transport, secure)
        specs = [{**spec, "secure": env.client_keys(secure)} for spec in specs]
    else:
        address = env.agent_for(transport)
    prefix = env.veth.client if transport == "netns" and env.veth else []
    procs = [subprocess.Popen([*prefix, sys.executable, "-m", "outboard.bench.worker",
                               json.dumps({**spec, "agent": address})],
                              env={**os.environ, **WORKER_ENV, **TRANSPORTS[transport], **SECURE_ENV.get(secure, {})},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for spec in specs]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append(child.result("benchmark worker", out, err, proc.returncode))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for result in results:
        if "error" in result:
            raise RuntimeError(result["error"])
        if result.get("lanes"):
            env.lanes[transport] = result["lanes"]
    return results


def worker(env: Env, transport: str, spec: dict[str, Any], secure: str = "") -> dict[str, Any]:
    """One benchmark client process on the transport."""
    return workers(env, transport, [spec], secure=secure)[0]


def client_core(env: Env) -> int | None:
    return env.cores[1] if env.cores else None


def peer_unavailable(env: Env, params: dict[str, Any]) -> str | None:
    if not env.embedded:
        return "ucx_perftest runs only beside the embedded agent (its server must run on the agent's host)"
    return ucx_perftest.unavailable() or transport_unavailable(env, params)


def transport_unavailable(env: Env, params: dict[str, Any]) -> str | None:
    if params.get("transport") != "netns":
        return None
    if not env.embedded:
        return "the netns run starts its own agent: not with --agent"
    return netns.unavailable()


def peer_run(env: Env, transport: str, test: str, size: int, iterations: int, warmup: int) -> ucx_perftest.Result:
    if transport == "netns":
        env.agent_for("netns")  # creates the namespaces
        assert env.veth is not None
        return ucx_perftest.run(test, size, iterations, env=TRANSPORTS[transport], warmup=warmup,
                                server_prefix=env.veth.server, client_prefix=env.veth.client, host=netns.SERVER_IP)
    cores = env.cores or (None, None)
    return ucx_perftest.run(test, size, iterations, env=TRANSPORTS[transport], warmup=warmup,
                            server_core=cores[0], client_core=cores[1])
