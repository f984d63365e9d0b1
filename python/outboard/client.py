"""The Python client: a connection to an agent, started locally when none is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from . import _core
from ._agent import LocalAgent
from .detokenize import Detokenizer
from .offload import AutoPolicy, OffloadTokenizer, Placement

#: Default deadline of a blocking call, in seconds.
DEFAULT_TIMEOUT_S = 10.0


class Client:
    """A connection to one agent. Safe to use from several threads."""

    def __init__(self, connection: _core.Connection, agent: LocalAgent | None = None) -> None:
        self._conn = connection
        self._agent = agent

    @property
    def connection(self) -> _core.Connection:
        """The underlying channel connection (one-sided API, progress, event fd)."""
        return self._conn

    @property
    def agent(self) -> LocalAgent | None:
        """The local agent this client started, if any."""
        return self._agent

    def request(self, service: str, payload: bytes = b"", *, timeout: float = DEFAULT_TIMEOUT_S) -> bytes:
        return self._conn.request(service, payload, timeout)

    def send(self, payload: bytes, *, service: str = "", timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self._conn.send(payload, service, timeout)

    def receive(self, *, timeout: float = DEFAULT_TIMEOUT_S) -> tuple[Any, ...]:
        """``("message", bytes)`` or ``("notify", cookie, offset, length)``."""
        return self._conn.receive(timeout)

    def tokenizer(self, name: str | Path, *, placement: Placement = "agent", policy: AutoPolicy | None = None,
                  timeout: float = DEFAULT_TIMEOUT_S, output: object = None) -> OffloadTokenizer:
        """``name``: "gpt2", "cl100k_base", "bert-base-uncased", a file name in the agent's vocabulary directory, or
        a path of this machine's (a ``Path``, or a name with a "/"), which the agent is sent: it opens
        nothing outside its own directory. ``placement``: "agent", "host", "auto" (per batch; see AutoPolicy) or
        "gpu" (GPT-2's BPE or BERT's WordPiece on this process's CUDA device, the ids into ``output``, a 1-D
        int32 CUDA tensor).
        ``output``: a writable 1-D int32 array of yours (pinned host memory for a GPU's copy, say), or a
        CUDA tensor (torch's: the agent writes the ids on the GPU, and a batch's ids are a torch view of it),
        that the agent's ids land in; it is held while any batch views it, and a batch that does not fit
        gets memory of the tokenizer's own. Host batches return arrays of their own. On one host with
        UCX 1.13 the agent reaches only the tokenizer's own memory (UCX-allocated) with one-sided
        writes: into ``output`` they are emulated with messages this process copies, so pass it only
        when the ids must be in that memory (a GPU's pinned buffer). Over a secure connection no
        one-sided write is allowed: the ids come in the agent's sealed answer and are copied into place."""
        return OffloadTokenizer(self._conn, name, placement=placement, policy=policy, timeout=timeout, output=output)

    def detokenizer(self, name: str | Path, *, timeout: float = DEFAULT_TIMEOUT_S) -> Detokenizer:
        """Streaming detokenization on the agent (``name`` as for ``tokenizer``): each sequence's ids in, the
        text they complete out, the decode state kept on the agent."""
        return Detokenizer(self._conn, name, timeout=timeout)

    def stats(self) -> dict[str, Any]:
        return json.loads(self.request("stats"))

    def close(self) -> None:
        self._conn.close()
        if self._agent is not None:
            self._agent.stop()
            self._agent = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    addr: str | None = None,
    *,
    max_msg_size: int | None = None,
    connect_timeout: float = 5.0,
    keepalive_ms: int | None = None,
    spin_us: int | None = None,
    adaptive_spin: bool = True,
    map_peer_regions: bool = True,
    ring_slots: int | None = None,
    session: str = "",
    secure: str = "auto",
    cert: str = "",
    key: str = "",
    ca: str = "",
    psk_file: str = "",
    crl: str = "",
    agent_host: str = "",
    rekey_bytes: int | None = None,
    tls_session_lifetime_s: int | None = None,
    agent_args: tuple[str, ...] = (),
) -> Client:
    """Connects to the agent at ``addr`` ("host:port"); ``None`` starts a local one. ``spin_us``: the most
    a waiting call busy-polls before sleeping; ``adaptive_spin``: poll only while this thread's
    recent answers came within ``spin_us`` (a small request's round trip), else sleep at once (False:
    always poll ``spin_us``, trading this process's CPU for wake-up time; README, "Waiting").
    ``map_peer_regions``: reach the agent's regions on this host by CPU copies where UCX maps them
    here (False: every put and get through UCX). ``ring_slots``: slots of this side's ring, into
    which an agent on this host writes small frames, as this side into the agent's (0: every frame
    through UCX). ``session``: which of the agent's sessions (processes) serves this connection:
    "" this process's (connections of one process share one), "new" one of its own, or 64 hex
    digits shared with whoever else presents them (``OUTBOARD_SESSION_TOKEN`` sets the process's).
    ``cert``/``key``/``ca`` (PEM files) or ``psk_file``: keys for TLS 1.3 with the agent (``outboard keys
    init DIR`` makes a set), used for an agent on another host, or on any with ``secure="always"``;
    the connection then seals every frame (under a new key every ``rekey_bytes``), and refuses
    one-sided access. The agent's certificate must list ``agent_host`` (a DNS name or IP address),
    by default the host in ``addr``; ``crl``: a CRL (PEM, ``outboard keys revoke``) whose
    certificates are refused. With certificates, a later connect to the same agent from this process
    resumes the TLS session (no certificates, a new X25519 exchange) for ``tls_session_lifetime_s``
    (0: a full handshake every time)."""
    agent = LocalAgent(*agent_args).start() if addr is None else None
    kwargs: dict[str, Any] = {"connect_timeout": connect_timeout, "map_peer_regions": map_peer_regions,
                              "adaptive_spin": adaptive_spin, "session": session, "secure": secure,
                              "cert": cert, "key": key, "ca": ca, "psk_file": psk_file, "crl": crl,
                              "agent_host": agent_host}
    if max_msg_size is not None:
        kwargs["max_msg_size"] = max_msg_size
    if keepalive_ms is not None:
        kwargs["keepalive_ms"] = keepalive_ms
    if spin_us is not None:
        kwargs["spin_us"] = spin_us
    if ring_slots is not None:
        kwargs["ring_slots"] = ring_slots
    if rekey_bytes is not None:
        kwargs["rekey_bytes"] = rekey_bytes
    if tls_session_lifetime_s is not None:
        kwargs["tls_session_lifetime_s"] = tls_session_lifetime_s
    try:
        conn = _core.Connection.connect(agent.address if agent else addr, **kwargs)
    except BaseException:
        if agent:
            agent.stop()
        raise
    return Client(conn, agent)
