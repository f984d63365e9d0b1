"""The secure channel against real agents: keys from `outboard keys init`, TLS 1.3 handshakes on
real sockets, sealed frames over UCX, and across two network namespaces a sniffer on the link
that checks the bytes are not in clear (and, as its control, that it sees them when they are)."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import outboard
from outboard import cli, errors
from outboard.bench import netns
from offload_support import sample_texts
from test_hostile import _allocates, wait_for

MARKER = b"OUTBOARD-PLAINTEXT-MARKER-"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("keys")
    # The agent's certificate lists the addresses these tests dial: loopback's and the namespace's.
    hosts = [a for h in ("localhost", "127.0.0.1", netns.SERVER_IP) for a in ("--agent-host", h)]
    for deployment in ("a", "b"):
        assert cli.main(["keys", "init", str(root / deployment), *hosts]) == 0
    return root


def certs(keys: Path, who: str, deployment: str = "a") -> dict[str, str]:
    d = keys / deployment
    return {"cert": str(d / f"{who}.pem"), "key": str(d / f"{who}.key"), "ca": str(d / "ca.pem")}


def agent_args(keys: Path, deployment: str = "a") -> list[str]:
    return [arg for k, v in certs(keys, "agent", deployment).items() for arg in (f"--{k}", v)]


def tenants(root: Path) -> Path:
    """Keys in root/"k" (loopback's names for the agent), with client certificates tenant1 and tenant2."""
    assert cli.main(["keys", "init", str(root / "k")]) == 0
    for t in ("tenant1", "tenant2"):
        assert cli.main(["keys", "issue", str(root / "k"), t]) == 0
    return root / "k"


def logging_to(log: Path) -> list[str]:
    """A LocalAgent prefix that sends the agent's log (its stderr) to `log`."""
    return ["sh", "-c", 'exec "$@" 2>"$0"', str(log)]


def test_keys_init_makes_keys_for_their_owner_only_and_never_overwrites(tmp_path: Path, capsys) -> None:
    d = tmp_path / "k"
    assert cli.main(["keys", "init", str(d), "--agent-name", "dpu0"]) == 0
    assert "--cert" in capsys.readouterr().out
    assert sorted(p.name for p in d.iterdir()) == ["agent.key", "agent.pem", "ca.key", "ca.pem", "client.key",
                                                   "client.pem", "crl.pem", "psk.txt"]
    for private in ("ca.key", "agent.key", "client.key", "psk.txt"):
        assert (d / private).stat().st_mode & 0o777 == 0o600, private
    agent_pem = subprocess.run(["openssl", "x509", "-in", str(d / "agent.pem"), "-noout", "-subject", "-ext",
                                "extendedKeyUsage,subjectAltName"], capture_output=True, text=True, check=True).stdout
    assert "CN = dpu0" in agent_pem and "TLS Web Server Authentication" in agent_pem
    # By default it lists loopback's names and this host's.
    assert f"DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1, DNS:{socket.gethostname()}" in agent_pem
    crl = subprocess.run(["openssl", "crl", "-in", str(d / "crl.pem"), "-CAfile", str(d / "ca.pem"), "-noout", "-text"],
                         capture_output=True, text=True, check=True)
    assert "verify OK" in crl.stderr + crl.stdout and "No Revoked Certificates" in crl.stdout
    before = (d / "agent.key").read_bytes()
    assert cli.main(["keys", "init", str(d)]) == 2
    assert "exists: keys are never overwritten" in capsys.readouterr().err
    assert (d / "agent.key").read_bytes() == before


def test_an_agent_with_certificates_serves_its_clients_and_names_those_it_refuses(keys: Path, tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    with outboard.LocalAgent("--secure", "always", *agent_args(keys), prefix=logging_to(log)) as agent:
        with outboard.connect(agent.address, secure="always", **certs(keys, "client")) as c:
            payload = os.urandom(1 << 20)
            assert c.request("echo", payload) == payload
        with pytest.raises(errors.Authentication, match="serves clients through TLS only"):
            outboard.connect(agent.address)
        with pytest.raises(errors.Authentication, match="certificate verify failed"):
            outboard.connect(agent.address, secure="always", **certs(keys, "client", "b"))
        with pytest.raises(errors.Authentication, match="alert unknown ca"):
            outboard.connect(agent.address, secure="always", **{**certs(keys, "client", "b"), "ca": certs(keys, "client", "a")["ca"]})
    text = log.read_text()
    assert "127.0.0.1:" in text and "certificate verify failed: unable to get local issuer certificate" in text, text


@pytest.mark.parametrize("lifetime", [600, 0], ids=["resumed", "lifetime-0"])
def test_a_later_connect_resumes_its_session_within_the_agents_lifetime(keys: Path, lifetime: int) -> None:
    with outboard.LocalAgent("--secure", "always", "--tls-session-lifetime-s", str(lifetime),
                             *agent_args(keys)) as agent:
        with outboard.connect(agent.address, secure="always", **certs(keys, "client")) as first:
            assert first.connection.security == "TLS 1.3 over X25519, agent /O=outboard/CN=outboard agent"
        with outboard.connect(agent.address, secure="always", **certs(keys, "client")) as again:
            assert again.request("echo", b"again") == b"again"
            assert again.connection.security.endswith(", resumed") == (lifetime > 0), again.connection.security
    with pytest.raises(errors.BadConfig, match="'tls-session-lifetime-s' is 604801, expected 0..604800"):
        outboard.LocalAgent("--tls-session-lifetime-s", "604801").start()


def test_a_psk_serves_its_holders_only(keys: Path) -> None:
    with outboard.LocalAgent("--secure", "always", "--psk-file", str(keys / "a" / "psk.txt")) as agent:
        with outboard.connect(agent.address, secure="always", psk_file=str(keys / "a" / "psk.txt")) as c:
            assert c.request("echo", b"psk") == b"psk"
        with pytest.raises(errors.Authentication):
            outboard.connect(agent.address, secure="always", psk_file=str(keys / "b" / "psk.txt"))


def test_a_tls_client_of_an_agent_without_keys_is_told_why(keys: Path) -> None:
    with outboard.LocalAgent() as agent:
        with pytest.raises(errors.Unsupported, match="has no keys and speaks no TLS"):
            outboard.connect(agent.address, secure="always", **certs(keys, "client"))


def test_listening_wide_takes_keys_or_an_explicit_insecure_that_is_logged(keys: Path, tmp_path: Path) -> None:
    with pytest.raises(errors.BadConfig, match="wider than loopback and the agent has no keys"):
        outboard.LocalAgent(listen="0.0.0.0:0").start()
    with outboard.LocalAgent(*agent_args(keys), listen="0.0.0.0:0") as agent:
        # Not loopback: TLS, unasked. No certificate names 0.0.0.0: the client says whom it expects.
        with outboard.connect(agent.address, agent_host="localhost", **certs(keys, "client")) as c:
            assert c.request("echo", b"wide") == b"wide"
    log = tmp_path / "agent.log"
    with outboard.LocalAgent("--insecure", listen="0.0.0.0:0", prefix=logging_to(log)):
        pass
    assert "--insecure: listening on 0.0.0.0:0 without keys; anyone who reaches it can use this agent" in log.read_text()


def test_a_client_refuses_an_agent_whose_certificate_lists_another_host(tmp_path: Path, capsys) -> None:
    assert cli.main(["keys", "init", str(tmp_path / "k"), "--agent-host", "dpu0.example", "--agent-host", "10.1.2.3"]) == 0
    mine = certs(tmp_path, "client", "k")
    with outboard.LocalAgent("--secure", "always", *agent_args(tmp_path, "k")) as agent:
        with pytest.raises(errors.Authentication, match="lists DNS:dpu0.example, IP:10.1.2.3, not 127.0.0.1"):
            outboard.connect(agent.address, secure="always", **mine)
        with outboard.connect(agent.address, secure="always", agent_host="dpu0.example", **mine) as c:
            assert c.request("echo", b"named") == b"named"
    assert cli.main(["keys", "init", str(tmp_path / "k2"), "--agent-host", "a b"]) == 2
    assert "--agent-host 'a b' is neither an IP address nor a DNS name" in capsys.readouterr().err


def test_a_revoked_client_is_refused_from_its_next_handshake_and_others_are_served(tmp_path: Path, capsys) -> None:
    d = tenants(tmp_path)
    tenant = {t: certs(tmp_path, t, "k") for t in ("tenant1", "tenant2")}
    log = tmp_path / "agent.log"
    with outboard.LocalAgent("--secure", "always", *agent_args(tmp_path, "k"), "--crl", str(d / "crl.pem"),
                             prefix=logging_to(log), log_level="info") as agent:
        with outboard.connect(agent.address, secure="always", **tenant["tenant1"]) as c:
            assert c.request("echo", b"before") == b"before"
        # Sessions of their own, as two tenants' processes would have.
        held = outboard.connect(agent.address, secure="always", session="new", **tenant["tenant1"])
        open_one = outboard.connect(agent.address, secure="always", session="new", **tenant["tenant2"])
        assert cli.main(["keys", "revoke", str(d), str(d / "tenant1.pem")]) == 0
        # Its open connection ends too, within the agent's next look at its key files (once a second).
        deadline = time.monotonic() + 10
        with pytest.raises(errors.Authentication, match="no longer accepts a certificate"):
            while time.monotonic() < deadline:
                held.request("echo", b"still there?", timeout=5)
                time.sleep(0.1)
        held.close()
        # tenant1 holds a session to resume; the agent's new keys know none, so it shows its certificate.
        with pytest.raises(errors.Authentication, match="alert certificate revoked"):
            outboard.connect(agent.address, secure="always", **tenant["tenant1"])
        with outboard.connect(agent.address, secure="always", **tenant["tenant2"]) as c:
            assert c.request("echo", b"after") == b"after"
        assert open_one.request("echo", b"still") == b"still"
        open_one.close()
    text = log.read_text()
    assert "keys read again" in text and "1 sessions ended" in text and "/O=outboard/CN=tenant1 (serial " in text, text
    assert f"is revoked by --crl {d / 'crl.pem'} (certificate verify failed: certificate revoked)" in text, text
    other = tmp_path / "other"
    assert cli.main(["keys", "init", str(other)]) == 0
    assert cli.main(["keys", "revoke", str(d), str(other / "client.pem")]) == 2
    assert f"{other / 'client.pem'}: not issued by the CA of {d / 'ca.pem'}" in capsys.readouterr().err


def test_a_tenant_holds_at_most_its_connections_and_never_joins_anothers_session(tmp_path: Path) -> None:
    tenants(tmp_path)
    tenant = {t: {"secure": "always", **certs(tmp_path, t, "k")} for t in ("tenant1", "tenant2")}
    token = "ab" * 32  # one session token, as if tenant1's had leaked to tenant2
    with outboard.LocalAgent("--secure", "always", *agent_args(tmp_path, "k"), "--max-client-connections", "2") as agent:
        held = [outboard.connect(agent.address, session=token, **tenant["tenant1"]) for _ in range(2)]
        with pytest.raises(errors.Again, match=r"client /O=outboard/CN=tenant1 holds 2 connections, its limit "
                                               r"\(agent option --max-client-connections\)"):
            outboard.connect(agent.address, **tenant["tenant1"])
        pids = {c.stats()["pid"] for c in held}
        assert len(pids) == 1
        with outboard.connect(agent.address, session=token, **tenant["tenant2"]) as other:
            assert other.request("echo", b"not held back") == b"not held back"
            assert other.stats()["pid"] not in pids  # the token alone does not join tenant1's session
        held.pop().close()

        def connects() -> bool:
            try:
                with outboard.connect(agent.address, **tenant["tenant1"]) as again:
                    return again.request("echo", b"again") == b"again"
            except errors.Again:
                return False

        # The session reports the close to the listener: soon, not at once.
        assert wait_for(connects), "a closed connection still counts against its tenant"
        for c in held:
            c.close()


def test_a_tenants_sessions_share_one_memory_quota(tmp_path: Path) -> None:
    tenants(tmp_path)
    tenant = {t: {"secure": "always", "session": "new", **certs(tmp_path, t, "k")} for t in ("tenant1", "tenant2")}
    region = b"A" + struct.pack("<Q", 1000 << 10)  # the memory service: allocate 1000 KiB
    with outboard.LocalAgent("--secure", "always", *agent_args(tmp_path, "k"), "--max-session-memory", "1MiB",
                             "--max-client-memory", "1536KiB") as agent:
        first, second = (outboard.connect(agent.address, **tenant["tenant1"]) for _ in range(2))
        other = outboard.connect(agent.address, **tenant["tenant2"])
        assert first.stats()["pid"] != second.stats()["pid"]  # two sessions, one tenant
        first.request("memory", region)
        # The first's region and the asking request's own 9 B (a TLS client's requests count while open).
        with pytest.raises(errors.NoMemory, match=r"memory region of 1024000 B: this client's sessions hold 1024009 B "
                                                  r"of its quota of 1572864 B \(agent option --max-client-memory\)"):
            second.request("memory", region)
        other.request("memory", region)  # another tenant's quota is untouched
        first.close()  # its session ends: what it held goes back to the tenant
        assert wait_for(lambda: _allocates(second, 1000 << 10)), "an ended session's memory still counts against its tenant"
        second.close()
        other.close()


def test_a_tenants_connections_share_one_request_quota(tmp_path: Path) -> None:
    tenants(tmp_path)
    tenant = {t: {"secure": "always", "session": "new", **certs(tmp_path, t, "k")} for t in ("tenant1", "tenant2")}
    watch = bytes([5, 8])  # an mpi watch (wire version 5): held unanswered while its session lives
    failed: list[BaseException | None] = []
    with outboard.LocalAgent("--secure", "always", *agent_args(tmp_path, "k"), "--max-client-requests", "3") as agent:
        first, second = (outboard.connect(agent.address, **tenant["tenant1"]) for _ in range(2))
        other = outboard.connect(agent.address, **tenant["tenant2"])
        assert first.stats()["pid"] != second.stats()["pid"]  # two sessions, one tenant

        def hold(client: outboard.Client) -> None:
            client.connection.submit("mpi", watch, 60.0, lambda _, error: failed.append(error))

        for client in (first, second):
            hold(client)
            assert client.request("echo", b"after") == b"after"  # in order: its watch is held now
        hold(first)  # the tenant's third
        for client in (first, second):  # the echo would be the fourth, on either session
            with pytest.raises(errors.Again, match=r"this client's connections hold 3 outstanding requests of its "
                                                   r"quota of 3 \(agent option --max-client-requests\)"):
                client.request("echo", b"over")
        assert other.request("echo", b"another tenant") == b"another tenant"
        first.close()  # its connection's requests go back to the tenant
        assert wait_for(lambda: _echoes(second)), "a closed connection's requests still count against its tenant"
        assert len(failed) == 2 and all(isinstance(e, ConnectionError) for e in failed), failed  # first's, by its close
        second.close()
        other.close()


def test_a_tenants_small_requests_and_one_way_messages_count_in_its_memory_quota(tmp_path: Path) -> None:
    tenants(tmp_path)
    tenant = {t: {"secure": "always", "session": "new", **certs(tmp_path, t, "k")} for t in ("tenant1", "tenant2")}
    watch = bytes([5, 8])  # an mpi watch: held while its session lives, unanswered or (one-way) unacknowledged
    quota = r"of its quota of 6 B \(agent option --max-client-memory\)"
    with outboard.LocalAgent("--secure", "always", *agent_args(tmp_path, "k"), "--max-client-memory", "6") as agent:
        first, second = (outboard.connect(agent.address, **tenant["tenant1"]) for _ in range(2))
        other = outboard.connect(agent.address, **tenant["tenant2"])
        first.connection.submit("mpi", watch, 60.0, lambda *_: None)  # a request: 2 B of tenant1's
        second.send(watch, service="mpi")  # one-way, on its other session: 2 B more
        assert second.request("echo", b"ok") == b"ok"  # in order, so the watch is held: 6 B of 6 while answered
        with pytest.raises(errors.NoMemory, match=rf"request of 3 B: this client's sessions hold 4 B {quota}"):
            first.request("echo", b"abc")
        first.send(watch, service="mpi")  # 6 B of 6
        assert first.request("echo", b"") == b""  # nothing held: served
        second.send(watch, service="mpi")  # over, with no answer to refuse it: its connection ends, saying why
        with pytest.raises(errors.NoMemory, match=rf"closed the connection: one-way message of 2 B: this client's "
                                                  rf"sessions hold 6 B {quota}"):
            second.request("echo", b"")
        assert other.request("echo", b"other") == b"other"  # another tenant's quota is untouched
        first.close()  # what its session held goes back to the tenant, as the ended connection's did
        third = outboard.connect(agent.address, **tenant["tenant1"])
        assert wait_for(lambda: _echoes(third, b"six B!")), "a closed session's messages still count against its tenant"
        for client in (second, third, other):
            client.close()


def _echoes(client: outboard.Client, payload: bytes = b"again") -> bool:
    try:
        return client.request("echo", payload) == payload
    except (errors.Again, errors.NoMemory):
        return False


def test_a_tls_client_tokenizes_with_its_ids_in_the_sealed_answer(keys: Path) -> None:
    texts = [t for t in sample_texts() if t][:20] + ["", "tail"]
    local = outboard.Tokenizer.gpt2()
    with outboard.LocalAgent("--secure", "always", *agent_args(keys)) as agent:
        with outboard.connect(agent.address, secure="always", max_msg_size=1 << 20, **certs(keys, "client")) as c:
            assert c.connection.security.startswith("TLS 1.3")
            output = np.full(1 << 16, -1, np.int32)
            for tok in (c.tokenizer("gpt2"), c.tokenizer("gpt2", output=output)):
                batch = tok.encode_batch(texts)
                assert all(np.array_equal(batch[i], local.encode(t)) for i, t in enumerate(texts))
                futures = [tok.submit([t]) for t in texts]  # many in flight, each in its own slots
                assert all(np.array_equal(f.result(timeout=10)[0], local.encode(t)) for f, t in zip(futures, texts))
                failed = tok.encode_batch(["short", texts[0]], max_len=4)
                assert np.array_equal(failed[0], local.encode("short"))
                assert isinstance(failed.errors[1], errors.TooBig)
                tok.close()
            assert np.array_equal(output[:len(local.encode(texts[0]))], local.encode(texts[0]))  # copied into place
            # The ids of ~1.3 MB of hex words do not fit our 1 MiB messages: the batch fails, saying so.
            distinct = " ".join(f"{i * 2654435761 % 2**32:x}" for i in range(150_000))
            tok = c.tokenizer("gpt2")
            with pytest.raises(errors.TooBig, match=r"its ids in band \(a sealed connection\), exceeds the client's "
                                                    r"max_msg_size 1048576 B: send smaller batches"):
                tok.encode_batch([distinct[: 1 << 19], distinct[: 1 << 19]])
            assert np.array_equal(tok.encode_batch(["still served"])[0], local.encode("still served"))
            tok.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_tenants_sessions_share_its_tokenize_threads_and_hold_back_no_other_tenant(tmp_path: Path,
                                                                                      workers: int) -> None:
    tenants(tmp_path)
    tenant = {t: {"secure": "always", "session": "new", **certs(tmp_path, t, "k")} for t in ("tenant1", "tenant2")}
    distinct = " ".join(f"{i * 2654435761 % 2**32:x}" for i in range(150_000))  # ~1.3 MB, no word repeated
    batch = [distinct] * 8  # ~0.4 s on one worker here: the three are sent within milliseconds
    expected = outboard.Tokenizer.gpt2().encode(distinct)
    with outboard.LocalAgent("--secure", "always", *agent_args(tmp_path, "k"), "--tokenize-threads", "1",
                             "--max-client-tokenize-threads", str(workers)) as agent:
        first, second = (outboard.connect(agent.address, **tenant["tenant1"]) for _ in range(2))
        other = outboard.connect(agent.address, **tenant["tenant2"])
        clients = (first, second, other)
        assert len({c.stats()["pid"] for c in clients}) == 3  # a session each
        toks = [c.tokenizer("gpt2") for c in clients]
        futures = [t.submit(batch) for t in toks]  # all three at once: each session's one worker is busy
        for f in futures:
            result = f.result(timeout=120)
            assert all(np.array_equal(result[i], expected) for i in range(len(batch)))
        waits = [c.stats()["tokenize_client_quota_waits"] for c in clients]
        # With one thread for tenant1, one of its batches waited for the other; with two, neither did.
        # tenant2's batch, tokenized beside them, never waits for tenant1's.
        assert waits == ([1, 0, 0] if workers == 1 and waits[0] else [0, 1, 0] if workers == 1 else [0, 0, 0]), waits
        for t in toks:
            t.close()
        for c in clients:
            c.close()


def test_a_crl_that_stops_loading_refuses_tls_clients_until_it_loads(tmp_path: Path) -> None:
    d = tenants(tmp_path)
    mine = certs(tmp_path, "client", "k")
    good = (d / "crl.pem").read_bytes()
    with outboard.LocalAgent("--secure", "always", *agent_args(tmp_path, "k"), "--crl", str(d / "crl.pem")) as agent:
        (d / "crl.pem").write_bytes(b"not a CRL\n")
        with pytest.raises(errors.BadConfig, match="keys changed on disk and do not load: --crl .* holds no CRL"):
            outboard.connect(agent.address, secure="always", **mine)
        (d / "crl.pem").write_bytes(good)
        with outboard.connect(agent.address, secure="always", **mine) as c:
            assert c.request("echo", b"back") == b"back"


def test_a_key_that_others_may_read_stops_the_agent_with_its_name(keys: Path, tmp_path: Path) -> None:
    open_key = tmp_path / "agent.key"
    open_key.write_bytes((keys / "a" / "agent.key").read_bytes())
    open_key.chmod(0o644)
    with pytest.raises(errors.BadConfig, match=f"--key {open_key}: mode 644 lets others"):
        outboard.LocalAgent("--cert", str(keys / "a" / "agent.pem"), "--key", str(open_key), "--ca",
                            str(keys / "a" / "ca.pem")).start()


def test_junk_in_a_tls_handshake_harms_no_other_client(keys: Path) -> None:
    with outboard.LocalAgent("--secure", "always", "--handshake-timeout-ms", "2000", *agent_args(keys)) as agent:
        host, port = agent.address.rsplit(":", 1)
        strangers = []
        for junk in (b"\x16\x03\x01\x00\x05hello", b"\x16" + os.urandom(5000), b"\x16\x03\x01\xff\xff" + bytes(100)):
            s = socket.create_connection((host, int(port)))
            s.sendall(junk)
            strangers.append(s)
        half_open = socket.create_connection((host, int(port)))
        half_open.sendall(b"\x16\x03\x01")  # and then nothing
        with outboard.connect(agent.address, secure="always", **certs(keys, "client")) as c:
            assert c.request("echo", b"served") == b"served"
        for s in strangers:
            s.settimeout(5)
            try:
                while s.recv(4096):
                    pass  # an alert, then the close
            except ConnectionResetError:
                pass
            s.close()
        half_open.settimeout(5)
        assert half_open.recv(4096) is not None  # closed by the handshake deadline, not held forever
        half_open.close()
        assert agent.process is not None and agent.process.poll() is None


SNIFFER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE (root): a burst is not dropped
    s.bind((sys.argv[1], 0))
    print("ready", flush=True)
    with open(sys.argv[2], "wb") as out:
        while True:
            out.write(s.recv(1 << 17))
            out.flush()
""")

CLIENT = textwrap.dedent("""
    import json, sys, numpy, outboard
    kwargs = json.loads(sys.argv[2])
    payload = bytes.fromhex(sys.argv[3]) * 4096
    with outboard.connect(sys.argv[1], connect_timeout=10, **kwargs) as c:
        assert c.request("echo", payload) == payload
        c.send(payload, service="sink")
        assert c.request("echo", b"sync") == b"sync"
        tok = c.tokenizer("gpt2")  # the ids in a sealed answer, or put one-sided in clear
        text = payload.decode()
        assert numpy.array_equal(tok.encode_batch([text])[0], outboard.Tokenizer.gpt2().encode(text))
        tok.close()
    print("ok")
""")


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
@pytest.mark.parametrize("secure", [True, False], ids=["keys", "insecure-control"])
def test_across_hosts_the_link_carries_no_byte_in_clear(keys: Path, tmp_path: Path, secure: bool) -> None:
    capture = tmp_path / "capture"
    env = {**os.environ, "UCX_TLS": "tcp,self"}
    with netns.VethPair() as pair:
        args = agent_args(keys) if secure else ["--insecure"]
        with outboard.LocalAgent(*args, listen=f"{netns.SERVER_IP}:0", prefix=pair.server, env={"UCX_TLS": "tcp,self"}) as agent:
            sniffer = subprocess.Popen([*pair.client, sys.executable, "-c", SNIFFER, pair.links[1], str(capture)],
                                       stdout=subprocess.PIPE, text=True)
            try:
                assert sniffer.stdout is not None and sniffer.stdout.readline().strip() == "ready"
                kwargs = certs(keys, "client") if secure else {}
                run = subprocess.run([*pair.client, sys.executable, "-c", CLIENT, agent.address, json.dumps(kwargs),
                                      MARKER.hex()], env=env, capture_output=True, text=True, timeout=60)
                assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr  # UCX may log to stdout too
                if secure:
                    refused = subprocess.run([*pair.client, sys.executable, "-c", CLIENT, agent.address, "{}",
                                              MARKER.hex()], env=env, capture_output=True, text=True, timeout=60)
                    assert refused.returncode != 0 and "serves clients of other hosts through TLS only" in refused.stderr
                time.sleep(0.5)  # the sniffer writes out what it caught
            finally:
                sniffer.kill()
                sniffer.wait()
    seen = capture.read_bytes()
    assert len(seen) > 2 * 4096 * len(MARKER), "the sniffer saw too little of the link to judge"
    if secure:
        assert MARKER not in seen
    else:
        assert seen.count(MARKER) > 4096  # the control: in clear, the sniffer does see it


HOLDER = textwrap.dedent("""
    import json, sys, outboard
    with outboard.connect(sys.argv[1], connect_timeout=10, **json.loads(sys.argv[2])) as c:
        assert c.request("echo", b"one") == b"one"
        print(c.stats()["pid"], flush=True)
        sys.stdin.readline()  # while the test knocks on its session's listeners
        assert c.request("echo", b"two") == b"two"
    print("ok", flush=True)
""")

KNOCK = textwrap.dedent("""
    import socket, sys
    s = socket.socket()
    s.settimeout(float(sys.argv[3]))
    try:
        s.connect((sys.argv[1], int(sys.argv[2])))
        print("connected")
    except OSError as e:
        print("no answer:", type(e).__name__)
""")


def listening_ports(pid: int) -> list[int]:
    """The TCP ports process `pid` listens on (in its network namespace)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    rows = [line.split() for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]]
    return [int(r[1].split(":")[1], 16) for r in rows if r[3] == "0A" and int(r[9]) in inodes]


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
@pytest.mark.parametrize("secure", [True, False], ids=["keys", "insecure"])
def test_a_remote_sessions_ucx_listeners_answer_its_clients_host_only(keys: Path, secure: bool) -> None:
    env = {**os.environ, "UCX_TLS": "tcp,self"}
    with netns.VethPair() as pair:
        args = agent_args(keys) if secure else ["--insecure"]
        with outboard.LocalAgent(*args, listen=f"{netns.SERVER_IP}:0", prefix=pair.server,
                                 env={"UCX_TLS": "tcp,self"}) as agent:
            holder = subprocess.Popen([*pair.client, sys.executable, "-c", HOLDER, agent.address,
                                       json.dumps(certs(keys, "client") if secure else {})],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            try:
                assert holder.stdout is not None and holder.stdin is not None
                ports = listening_ports(int(holder.stdout.readline()))
                assert ports, "the session listens nowhere: nothing to knock on"
                for port in ports:
                    # A stranger (here: another process of the agent's host) gets no answer from UCX;
                    # the client's host does.
                    stranger = subprocess.run([*pair.server, sys.executable, "-c", KNOCK, netns.SERVER_IP, str(port), "2"],
                                              capture_output=True, text=True, timeout=30)
                    assert stranger.stdout.strip() == "no answer: TimeoutError", stranger.stdout + stranger.stderr
                    friend = subprocess.run([*pair.client, sys.executable, "-c", KNOCK, netns.SERVER_IP, str(port), "5"],
                                            capture_output=True, text=True, timeout=30)
                    assert friend.stdout.strip() == "connected", friend.stdout + friend.stderr
                holder.stdin.write("\n")
                holder.stdin.flush()
                assert holder.stdout.readline().strip() == "ok"
            finally:
                holder.kill()
                holder.wait()
