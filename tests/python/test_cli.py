"""The `outboard` command, run as a user runs it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from outboard.bench.report import SMOKE_NOTE
from outboard.bench.suites import tokenize_offload

OUTBOARD = str(Path(sys.executable).parent / "outboard")


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OUTBOARD, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_latency_quick_prints_percentiles_and_stops_its_agent(tmp_path) -> None:
    out = tmp_path / "lat.json"
    r = run("latency", "--quick", "--sizes", "64,4096", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert re.search(r"64 B\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+", r.stdout), r.stdout
    assert "transport lanes: sysv" in r.stdout or "posix" in r.stdout
    pid = int(re.search(r"local agent \(pid (\d+)\)", r.stdout).group(1))
    assert not pid_alive(pid)
    rows = json.loads(out.read_text())["rows"]
    assert [row["size"] for row in rows] == [64, 4096]
    assert all(row["mismatches"] == 0 and row["p50_us"] <= row["p99_us"] for row in rows)


def agents_of(parent: int) -> list[int]:
    """outboard-agent processes whose parent is `parent`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            comm = stat.with_name("comm").read_text().strip()
        except OSError:
            continue
        if int(fields[1]) == parent and comm.startswith("outboard-agent"):
            found.append(int(stat.parent.name))
    return found


def test_run_is_the_quick_tokenization_offload_benchmark(tmp_path) -> None:
    out = tmp_path / "main"
    r = run("run", "--smoke", "--out", str(out), timeout=420)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # The terminal gets a summary read in seconds, not the report: per model and placement the 8 KB p50,
    # the consumer's CPU per request and the requests whose ids differ from the host's; then the report's path.
    assert "# Tokenization offload" not in r.stdout and "Published (BF3-Bench" not in r.stdout
    assert f"report: {out}/report.md" in r.stdout
    eight_kb = {(x["params"]["model"], x["impl"]): x for x in rows if x["case"] == "single" and x["params"] == {
        "model": x["params"]["model"], "workload": "corpus", "payload_bytes": 8192, "batch": 1}}  # the report's: the last
    assert len(eight_kb) == 6
    for (model, impl), x in eight_kb.items():
        mine = [y for y in rows if y["impl"] == impl and y["params"]["model"] == model]
        line = (f"{model:<20} {impl:<10} {x['metrics']['total_us']['p50']:>12.1f} "
                f"{x['metrics']['consumer_cpu_us']['p50']:>20.1f}  0 of "
                f"{sum(y['correctness']['requests'] for y in mine)} requests")
        assert line in r.stdout.splitlines(), (line, r.stdout)
    assert len(r.stdout.splitlines()) < 20
    single = [x for x in rows if x["case"] == "single"]
    load = [x for x in rows if x["case"] == "load"]
    native = [x for x in rows if x["case"] == "load_native"]
    shaped = [x for x in rows if x["case"] == "load_asyncio"]
    engine = [x for x in rows if x["case"] == "load_engine"]
    assert {x["impl"] for x in single} == {x["impl"] for x in load} == {x["impl"] for x in engine} == {
        "host", "agent", "auto"}
    assert len(engine) == len(load) and all(x["params"]["step_s"] > 0 for x in engine)
    assert all(x["correctness"]["failed"] == 0 and x["correctness"]["ids_differ"] == 0 for x in engine)
    for other in (native, shaped):  # the same load from C++, and from an asyncio server
        assert {x["impl"] for x in other} == {"host", "agent"} and len(other) == len(load) // 3 * 2
        assert all(x["correctness"]["failed"] == 0 and x["correctness"]["ids_differ"] == 0
                   and x["correctness"]["requests"] > 0 and x["metrics"]["throughput_rps"] > 0
                   and x["metrics"]["arrival_cpu_us_per_request"] > 0 for x in other)
    assert {x["params"]["model"] for x in single} == {"gpt2", "bert-base-uncased"}
    # Every agent request gave the in-process ids, on the payloads that were timed.
    assert all(x["correctness"]["ids_differ"] == 0 and x["correctness"]["requests"] > 0 for x in single)
    assert all(x["correctness"]["failed"] == 0 and x["correctness"]["ids_differ"] == 0
               and x["metrics"]["throughput_rps"] > 0 for x in load)
    # The load generator's own cost is measured once per rate and taken out of each placement's.
    for x in load:
        m = x["metrics"]
        assert m["arrival_cpu_us_per_request"] > 0
        assert m["consumer_cpu_net_us_per_request"] == max(
            m["consumer_cpu_us_per_request"] - m["arrival_cpu_us_per_request"], 0.0)
    assert len({(x["params"]["model"], x["params"]["offered_rps"], x["metrics"]["arrival_cpu_us_per_request"])
                for x in load}) == len(load) // 3
    for stage in ("acquire", "tokenize", "transfer", "embed", "total", "consumer_cpu", "agent_cpu"):
        assert all(f"{stage}_us" in x["metrics"] for x in single)
    # Every cell runs once (three times without --smoke); each says which side was saturated; in the first
    # repetition an agent request's consumer CPU is split into submit, wait and completion, which the whole
    # process's CPU per request contains.
    cells = load + native + shaped + engine
    assert {x["params"]["repeat"] for x in cells} == {0}
    for x in cells:
        m = x["metrics"]
        assert set(m["saturated"]) <= {"host", "agent"} and m["offered_share"]
        split = m.get("consumer_cpu_split_us_per_request")
        assert (split is None) == (x["impl"] == "host" or x["params"]["repeat"] != 0), x
        if split:
            assert set(split) == {"submit", "wait", "completion"} and split["submit"] > 0 and split["completion"] > 0
            assert sum(split.values()) <= m["consumer_cpu_us_per_request"] * 1.05
    assert all(x["metrics"]["doorbells_per_request"] > 0 for x in load + native if x["impl"] == "agent")
    assert all(x["metrics"]["consumer_cpu_split_us_per_request"]["wait"] > 0 for x in load + native
               if x["impl"] == "agent" and x["params"]["repeat"] == 0)  # a thread sleeps for the answers there
    assert sorted(p.name for p in (out / "charts").iterdir()) == sorted(
        f"{m}-{c}.png" for m in ("gpt2", "bert-base-uncased") for c in ("stages", "payload", "load-8KB"))
    meta = json.loads((out / "meta.json").read_text())
    assert meta["consumer_cores"] and meta["agent_cores"]
    assert meta["command"].startswith("outboard bench tokenize --smoke --models gpt2,bert-base-uncased")
    # The rates are fractions of the host's capacity, timed before the load test (as the agent's), up to saturation.
    assert all(meta["agent_capacity_rps"][m]["8192"] > 0 for m in ("gpt2", "bert-base-uncased"))
    for x in load:
        share = x["params"]["offered_rps"] / meta["host_capacity_rps"][x["params"]["model"]]["8192"]
        assert min(abs(share - f) for f in (0.25, 0.5, 1.0)) < 1e-9, share
    assert meta["embed_device"] == "cpu (numpy)" or meta["embed_device"].startswith("cuda (torch")
    # The report is rebuilt from the directory alone.
    (out / "report.md").unlink()
    r = run("report", str(out))
    assert r.returncode == 0, r.stderr
    report = (out / "report.md").read_text()
    assert "Published (BF3-Bench, **another machine**" in report
    assert "| arrival | submit | wait | completion | rest |" in report and "goal ≤ 0.10" not in report
    assert SMOKE_NOTE in report  # one repetition judges nothing; the same rows outside a smoke run are judged
    assert "goal ≤ 0.10" in tokenize_offload.render(rows, {**meta, "smoke": False})


@contextmanager
def interruptible(*args: str, **kwargs: Any) -> Iterator[subprocess.Popen[str]]:
    """`outboard ARGS` as a terminal starts it: a process started with SIGINT ignored (a shell's
    background job, for one) keeps ignoring it, as Python then installs no handler, so the child
    gets the default back. Killed at the end if still running, so a failure leaves nothing spinning."""
    p = subprocess.Popen([OUTBOARD, *args], text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kwargs)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_interrupted_benchmark_stops_its_agent(tmp_path) -> None:
    with interruptible("bench", "channel", "--out", str(tmp_path / "x"), "--no-progress",
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as p:
        deadline = time.monotonic() + 30
        agents: list[int] = []
        while not agents and time.monotonic() < deadline:
            agents = agents_of(p.pid)
            time.sleep(0.05)
        assert agents, "no agent started"
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 130
    deadline = time.monotonic() + 5
    while any(pid_alive(a) for a in agents) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(a) for a in agents)


def test_tcp_transport_is_honoured_through_ucx_tls() -> None:
    r = run("latency", "--quick", "--sizes", "64", env={"UCX_TLS": "tcp,self"})
    assert r.returncode == 0, r.stderr
    assert "transport lanes: tcp" in r.stdout, r.stdout


def test_interrupt_stops_the_local_agent() -> None:
    with interruptible("latency", "--iterations", "100000000", "--sizes", "64", stdout=subprocess.PIPE) as p:
        line = p.stdout.readline()
        pid = int(re.search(r"pid (\d+)", line).group(1))
        assert pid_alive(pid)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        assert p.wait(15) == 130
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)


def test_json_options_for_commands(tmp_path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"sizes": "64", "quick": True, "log-level": 40}))
    r = run("latency", "--json", str(good))
    assert r.returncode == 0, r.stderr
    assert "64 B" in r.stdout and "4 KiB" not in r.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"iterations": "lots"}))
    r = run("latency", "--json", str(bad))
    assert r.returncode == 2
    assert "key 'iterations'" in r.stderr and "expected integer" in r.stderr
    bad.write_text(json.dumps({"itrations": 5}))
    r = run("latency", "--json", str(bad))
    assert r.returncode == 2 and "unknown key 'itrations'" in r.stderr


def test_agent_command_passes_options_through() -> None:
    r = run("agent", "--", "--help")
    assert r.returncode == 0 and "--max-msg-size" in r.stdout
    r = run("agent", "--", "--max-msg-size", "lots")
    assert r.returncode == 2 and "option 'max-msg-size'" in r.stderr


def test_failing_command_still_stops_its_agent() -> None:
    r = run("latency", "--sizes", str(100 << 20), "--quick")
    assert r.returncode == 1
    assert "exceeds max_msg_size 67108864 B" in r.stderr, r.stderr
    pid = int(re.search(r"local agent \(pid (\d+)\)", r.stdout).group(1))
    assert not pid_alive(pid)


def test_bench_tokenize_refuses_a_load_payload_outside_the_sweep(tmp_path) -> None:
    r = run("bench", "tokenize", "--quick", "--load-payloads", "8192,5000", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "load payloads [8192, 5000]" in r.stderr and "65536" in r.stderr
    r = run("bench", "tokenize", "--quick", "--load-payloads", "8k", "--out", str(tmp_path / "y"))
    assert r.returncode == 2 and "--load-payloads: '8k'" in r.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_every_suite_is_registered_with_its_own_options(monkeypatch, capsys) -> None:
    """The CLI knows no suite by name: a suite module that declares a SUITE, with options of its own,
    gets its `outboard bench` command (a fake suite here, added to the registry)."""
    import types

    from outboard import bench, cli
    from outboard.bench.declare import Option, Suite

    fake = types.ModuleType("outboard.bench.suites.fake_for_cli")
    fake.SUITE = Suite("fake-cli", "Fake", help="a fake suite", uses_agent=False, options=[
        Option("--widgets", "widget counts", default="1,2", parse=lambda t: [int(x) for x in t.split(",")]),
        Option("--fast", "a switch", type=bool)])
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setitem(bench.SUITES, "fake-cli", "fake_for_cli")
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "fake-cli", "--quick", "--widgets", "3,4"])
    assert args.func is cli.cmd_bench and args.suite == "fake-cli"
    options = fake.SUITE.parse(args)
    assert options.quick and options.extra == {"widgets": [3, 4], "fast": False}
    assert fake.SUITE.defaults() == {"widgets": [1, 2], "fast": False}
    # The real suites too, each with what it declares; the names users know stay.
    assert set(bench.SUITES) >= {"channel", "rdma", "graph", "tokenize", "tokenizer"}
    for name in bench.SUITES:
        suite = bench.suite_module(name).SUITE
        args = parser.parse_args(["bench", suite.name])
        assert args.func is cli.cmd_bench
        assert suite.parse(args).extra == suite.defaults()
        with pytest.raises(SystemExit):
            parser.parse_args(["bench", suite.name, "--help"])
        shown = capsys.readouterr().out
        assert all(option.flag in shown for option in suite.options), (name, shown)


def test_bench_tokenizer_refuses_an_unknown_model() -> None:
    r = run("bench", "tokenizer", "--quick", "--models", "gpt3")
    assert r.returncode == 2 and "--models: unknown ['gpt3']" in r.stderr
