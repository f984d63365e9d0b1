"""Suite ``channel`` against a real agent and a real ucx_perftest: smoke runs, every transport,
re-rendering and comparing runs through the CLI. Nothing here asserts speed."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outboard import _core, cli
from outboard.bench import harness, netns, stats
from outboard.bench.declare import Case, Options
from outboard.bench.report import render as render_report
from outboard.bench.suites import channel
from outboard.bench.peers import ucx_perftest


def _rows(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("channel") / "smoke"
    t0 = time.monotonic()
    assert cli.main(["bench", "channel", "--smoke", "--out", str(out), "--no-progress"]) == 0
    print(f"outboard bench channel --smoke took {time.monotonic() - t0:.1f} s")
    return out


def test_smoke_run_covers_every_case_and_checks_every_cell(smoke_run: Path) -> None:
    rows = _rows(smoke_run)
    meta = json.loads((smoke_run / "meta.json").read_text())
    assert {r["case"] for r in rows} == {"latency", "streaming", "sessions", "concurrent", "secure_connect",
                                         "secure_latency", "secure_streaming"}
    assert all(r["correctness"]["ok"] for r in rows), [r for r in rows if not r["correctness"]["ok"]]
    assert meta["failed"] == {}
    # Same-host runs go over shared memory, and the report says so.
    assert {"sysv", "posix", "cma"} & set(meta["transports"]["shm"].split("+"))
    ours = [r for r in rows if r["impl"] == "outboard" and r["case"] == "latency"]
    assert {r["params"]["size"] for r in ours} == {64, 4096, 65536}
    assert all(r["metrics"]["one_way_us"]["p50"] > 0 and r["correctness"]["mismatches"] == 0 for r in ours)
    stream = [r for r in rows if r["impl"] == "outboard" and r["case"] == "streaming"]
    assert stream and all(r["metrics"]["mib_s"]["p50"] > 0 for r in stream)
    sessions = {r["params"]["count"]: r["metrics"] for r in rows if r["case"] == "sessions"}
    assert set(sessions) == {1, 10, 1000} and all(m["connect_us"]["p50"] > 0 for m in sessions.values())
    # The secure channel beside plaintext on the same link: both kinds of keys, every echo checked.
    connects = {r["impl"] for r in rows if r["case"] == "secure_connect"}
    assert connects == {channel.SECURE, channel.FULL, channel.PSK, channel.PLAIN}
    secure = [r for r in rows if r["case"] in ("secure_latency", "secure_streaming") and r["impl"] == channel.SECURE]
    assert secure and all(r["correctness"]["ok"] for r in secure)
    assert all(r["metrics"]["agent_cpu_s_per_gib"] > 0 for r in secure if r["case"] == "secure_streaming")
    # Where the build seals AES-256-GCM with ipsec-mb, OpenSSL's runs beside it, client and agent.
    assert meta["seal_engine"] == _core.seal_engine()
    streams = {r["impl"] for r in rows if r["case"] == "secure_streaming"}
    if _core.seal_engine().startswith("ipsec-mb"):
        assert streams == {channel.SECURE, channel.OPENSSL_SEAL, channel.PLAIN}
    else:
        assert streams == {channel.SECURE, channel.PLAIN}
        assert any("seals AES-256-GCM with OpenSSL" in why for why in meta["skipped"].values()), meta["skipped"]


def test_a_servers_listening_socket_is_found_in_proc_without_ss() -> None:
    """The ucx_perftest peer waits for its own server's socket through /proc, not `ss` (absent on
    the GPU machines): a listener of that process on that port, and nothing else, counts."""
    mine = socket.socket(socket.AF_INET6)
    mine.bind(("::1", 0))
    mine.listen()
    port = mine.getsockname()[1]
    other = subprocess.Popen([sys.executable, "-c", "import socket, time\n"
                              "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
                              "print(s.getsockname()[1], flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert ucx_perftest.listening(os.getpid(), port)
        theirs = int(other.stdout.readline())
        assert ucx_perftest.listening(other.pid, theirs)
        assert not ucx_perftest.listening(os.getpid(), theirs)  # another process's listener
        assert not ucx_perftest.listening(other.pid, port)
    finally:
        other.kill()
        other.wait()
        other.stdout.close()
        mine.close()
    assert not ucx_perftest.listening(os.getpid(), port)  # closed
    assert not ucx_perftest.listening(other.pid, theirs)  # a process that is gone


@pytest.mark.skipif(ucx_perftest.unavailable() is not None, reason="ucx_perftest missing")
def test_peer_runs_in_the_same_run_and_ratios_are_reported(smoke_run: Path) -> None:
    rows = _rows(smoke_run)
    peer = {r["params"]["size"]: r["metrics"] for r in rows if r["impl"] == "ucx_perftest" and r["case"] == "latency"}
    assert set(peer) == {64, 4096, 65536} and all(m["one_way_us"]["p50"] > 0 for m in peer.values())
    ratios = stats.ratios(rows, channel.LATENCY)
    assert len(ratios) == 3 and all(v > 0 for v in ratios.values())
    report = (smoke_run / "report.md").read_text()
    assert "outboard / ucx_perftest (lower is better" in report and "outboard / ucx_perftest (higher is better" in report
    # A smoke run measures each cell once and judges no goal; the same rows of a run that measures are judged.
    assert all(r.repetitions == 1 for r in stats.ratio_stats(rows, channel.LATENCY).values())
    assert "goal ≤ 1.3×" not in report
    meta = json.loads((smoke_run / "meta.json").read_text())
    measured = render_report(channel.SUITE, rows, {**meta, "smoke": False}, None)
    assert "goal ≤ 1.3×" in measured and "goal ≥ 0.8×" in measured
    for chart in ("latency-one_way_us-p50.png", "streaming-mib_s-p50.png"):
        assert (smoke_run / "charts" / chart).stat().st_size > 1000


def test_report_command_re_renders_and_compares(smoke_run: Path, capsys) -> None:
    before = (smoke_run / "report.md").read_text()
    (smoke_run / "report.md").unlink()
    assert cli.main(["report", str(smoke_run)]) == 0
    assert (smoke_run / "report.md").read_text() == before
    assert cli.main(["report", str(smoke_run), str(smoke_run)]) == 0
    compared = (smoke_run / f"compare-{smoke_run.name}.md").read_text()
    assert "| after / before |" in compared and "1.00×" in compared


def test_report_of_a_missing_directory_names_it(tmp_path: Path, capsys) -> None:
    assert cli.main(["report", str(tmp_path / "nope")]) != 0
    assert "not a benchmark run directory" in capsys.readouterr().err


def test_unknown_case_is_refused_with_the_known_ones(capsys) -> None:
    assert cli.main(["bench", "channel", "--quick", "--cases", "latncy"]) != 0
    err = capsys.readouterr().err
    assert "latncy" in err and "latency" in err and "streaming" in err


def _small(case: Case, transports: list[str]) -> Case:
    return dataclasses.replace(case, quick={"transport": transports, "size": [64]})


@pytest.mark.parametrize("transport", ["tcp", "netns"])
def test_tcp_and_two_namespace_runs(transport: str, tmp_path: Path) -> None:
    if transport == "netns" and netns.unavailable():
        pytest.skip(netns.unavailable())
    suite = dataclasses.replace(channel.SUITE, cases=[_small(channel.LATENCY, [transport]),
                                                     _small(channel.STREAMING, [transport])])
    d = harness.run(suite, Options(quick=True, smoke=True, out=str(tmp_path / transport), progress=False))
    rows = _rows(d)
    meta = json.loads((d / "meta.json").read_text())
    assert meta["failed"] == {}
    ours = [r for r in rows if r["impl"] == "outboard"]
    assert len(ours) == 2 and all(r["correctness"]["ok"] for r in ours)  # each case once: a smoke run
    assert meta["transports"][transport] == "tcp"  # really over TCP, not shared memory
    if ucx_perftest.unavailable() is None:
        assert {r["case"] for r in rows if r["impl"] == "ucx_perftest"} == {"latency", "streaming"}


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as root here: the not-root path is not reachable")
def test_netns_without_root_is_skipped_with_the_reason() -> None:
    assert "root" in (netns.unavailable() or "")


@pytest.mark.skipif(ucx_perftest.unavailable() is not None, reason="ucx_perftest missing")
def test_peer_server_whose_port_is_taken_is_started_on_another(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        ports = [taken.getsockname()[1]]
        real_free_port = ucx_perftest._free_port
        monkeypatch.setattr(ucx_perftest, "_free_port", lambda: ports.pop() if ports else real_free_port())
        result = ucx_perftest.run("ucp_am_lat", 64, 1000)
    assert not ports and result.iterations == 1000 and result.p50_us > 0
