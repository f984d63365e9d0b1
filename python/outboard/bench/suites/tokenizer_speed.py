"""``outboard bench tokenizer``: encoding speed of Outboard against its peers
(GPT-2 BPE: tiktoken, HF tokenizers, fastokens, gigatoken, riptoken; cl100k and o200k: tiktoken, fastokens,
gigatoken, riptoken, bpe-openai, toktok, quicktok; Tekken: mistral-common; BERT WordPiece: HF tokenizers, tokie).

Protocol (shared/reference/tokenizers.md §8): one pinned core, fresh distinct payloads every round
(8 KB chunks cut from a mixed 10 MB corpus, and whole documents), implementations interleaved within
a round, p50/p90/p99 per 8 KB chunk and MB/s, every peer's ids compared with tiktoken's on the very
payloads that were timed. A speed number counts only for an exact implementation: every one also goes
through the exactness gate (outboard.bench.gate: named traps, random mixtures, every code point in
the family's contexts), and "the fastest exact peer" is one that passed it and differed on no payload.

Regimes (§7b), because libraries cache pre-tokens: each implementation in a fresh process encodes
distinct 8 KB chunks (cold), the same chunks again (warm), then chunks of other documents (unseen).
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import random
import string
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from ...errors import BadConfig
from .. import gate
from ..declare import Option, Suite, numbers
from ..stats import summarize

CHUNK_BYTES = 8192
#: The worst case's sizes (a smoke run takes the first): linear time keeps µs/KiB flat across them.
WORST_CASE_BYTES = (256 << 10, 512 << 10, 1 << 20)
REGIMES = ("cold", "warm", "unseen")
NO_CACHE = "outboard, no cache"  # the regimes' before/after: the same tokenizer with its pre-token cache off
#: The exactness gate's family for each model (outboard.bench.gate).
GATE_FAMILIES = {"gpt2": "gpt2", "cl100k": "cl100k", "o200k": "o200k", "tekken": "tekken", "mistral": "mistral-v1",
                 "bert": "bert"}
#: What a quick and a smoke run sweep of the gate: every n-th code point, and so many random mixtures.
GATE_QUICK, GATE_SMOKE = (16, 2_000), (4096, 100)
#: Differing gate strings a row keeps (repr, cut), to say where an implementation differs.
GATE_EXAMPLES, GATE_EXAMPLE_CHARS = 3, 40


def _chunks(docs: list[str], size: int) -> list[str]:
    """Distinct ~size-byte pieces of the corpus, cut at character boundaries."""
    data = "\x00".join(docs).encode()
    out, i = [], 0
    while i < len(data):
        j = min(i + size, len(data))
        while j < len(data) and (data[j] & 0xC0) == 0x80:
            j -= 1
        out.append(data[i:j].decode().replace("\x00", "\n"))
        i = j
    return list(dict.fromkeys(out))


Peers = tuple[dict[str, Callable[[str], Any]], dict[str, str], str]


def _bert_peers(tmp: Path) -> Peers:
    """BERT uncased: outboard, HF tokenizers (the reference; padding and truncation off) and tokie."""
    from ... import vocab

    impls: dict[str, Callable[[str], Any]] = {}
    missing: dict[str, str] = {}
    impls["outboard"] = _ours("bert")
    reference = "outboard"
    try:
        from tokenizers import Tokenizer as HF

        hf = HF.from_file(str(vocab.path("bert-base-uncased-json")))
        hf.no_padding()
        hf.no_truncation()
        impls["hf-tokenizers"] = lambda t: hf.encode(t, add_special_tokens=False).ids
        reference = "hf-tokenizers"
    except ImportError:
        missing["hf-tokenizers"] = "not installed"
    try:
        import tokie

        tk = tokie.Tokenizer.from_json(str(vocab.path("bert-base-uncased-json")))
        impls["tokie"] = lambda t: tk.encode(t, add_special_tokens=False).ids
    except ImportError:
        missing["tokie"] = "not installed (pip install tokie)"
    return impls, missing, reference


def _bpe_peers(model: str, tmp: Path) -> Peers:
    """A tiktoken encoding (gpt2, cl100k, o200k): outboard, tiktoken (the reference), HF tokenizers (for
    cl100k and o200k built from the ranks and pattern, as a converter would), fastokens, gigatoken and
    riptoken, and for cl100k and o200k bpe-openai, toktok and quicktok."""
    from ... import vocab
    from .. import references

    path = vocab.path(references.ENCODINGS[model].vocab)
    impls: dict[str, Callable[[str], Any]] = {"outboard": _ours(model)}
    missing: dict[str, str] = {}

    def peer(name: str, package: str, make: Callable[[], Callable[[str], Any]]) -> None:
        try:
            impls[name] = make()
        except ImportError:
            missing[name] = f"not installed (pip install {package})"

    def hf() -> Callable[[str], Any]:
        if model == "gpt2":
            tok = references.hf_gpt2(*references.write_vocab_merges(references.load_ranks(path), tmp))
        else:
            tok = references.hf_tiktoken(model, path, tmp)
        return lambda t: tok.encode(t, add_special_tokens=False).ids

    def fastokens() -> Callable[[str], Any]:
        tok = references.fastokens_encoding(model, path)
        return lambda t: tok.encode(t).ids

    peer("tiktoken", "tiktoken", lambda: references.tiktoken_encoding(model, references.load_ranks(path)).encode_ordinary)
    peer("hf-tokenizers", "tokenizers", hf)
    peer("fastokens", "fastokens", fastokens)
    # gigatoken, toktok and quicktok cache pre-tokens: their warm regime is what they publish.
    peer("gigatoken", "gigatoken", lambda: references.gigatoken_encoding(model, path).encode)
    peer("riptoken", "riptoken", lambda: references.riptoken_encoding(model, references.load_ranks(path)).encode_ordinary)
    if model != "gpt2":
        peer("bpe-openai", "bpe-openai", lambda: references.bpe_openai_encoding(model).encode_ordinary)
        peer("toktok", "toktok-rs", lambda: references.toktok_encoding(model).encode_ordinary)
        peer("quicktok", "quicktok-v1", lambda: references.quicktok_encoding(model).encode)
    return impls, missing, "tiktoken" if "tiktoken" in impls else "outboard"


def _tekken_peers(tmp: Path) -> Peers:
    """Mistral's Tekken: outboard, mistral-common's Tekkenizer (the reference) and HF tokenizers (built
    from the file's ranks and pattern, as a converter would)."""
    from ... import vocab
    from .. import references

    impls: dict[str, Callable[[str], Any]] = {"outboard": _ours("tekken")}
    missing: dict[str, str] = {}
    try:
        hf = references.hf_tekken(vocab.path("tekken"), tmp)
        impls["hf-tokenizers"] = lambda t: hf.encode(t, add_special_tokens=False).ids
    except ImportError:
        missing["hf-tokenizers"] = "not installed (pip install tokenizers)"
    try:
        ref = references.tekken(vocab.path("tekken"))
        impls["mistral-common"] = lambda t: ref.encode(t, bos=False, eos=False)
    except ImportError:
        missing["mistral-common"] = "not installed (pip install mistral-common)"
    return impls, missing, "mistral-common" if "mistral-common" in impls else "outboard"


def _sentencepiece_peers(tmp: Path) -> Peers:
    """Mistral 7B's SentencePiece BPE: outboard, sentencepiece (the reference), HF tokenizers (as
    transformers' Llama converter builds it) and gigatoken."""
    from ... import vocab
    from .. import references

    path = vocab.path("mistral-v1")
    impls: dict[str, Callable[[str], Any]] = {"outboard": _ours("mistral")}
    missing: dict[str, str] = {}
    try:
        impls["sentencepiece"] = references.sentencepiece(path).encode
    except ImportError:
        missing["sentencepiece"] = "not installed (pip install sentencepiece)"
    try:
        hf = references.hf_sentencepiece(path)
        impls["hf-tokenizers"] = lambda t: hf.encode(t, add_special_tokens=False).ids
    except ImportError:
        missing["hf-tokenizers"] = "not installed (pip install tokenizers sentencepiece)"
    try:
        import gigatoken

        impls["gigatoken"] = gigatoken.Tokenizer.from_sentencepiece(str(path)).encode
    except ImportError:
        missing["gigatoken"] = "not installed (pip install gigatoken)"
    return impls, missing, "sentencepiece" if "sentencepiece" in impls else "outboard"


MODELS: dict[str, Callable[[Path], Peers]] = {
    "gpt2": functools.partial(_bpe_peers, "gpt2"), "cl100k": functools.partial(_bpe_peers, "cl100k"),
    "o200k": functools.partial(_bpe_peers, "o200k"), "tekken": _tekken_peers, "mistral": _sentencepiece_peers,
    "bert": _bert_peers}
BPE_MODELS = ("gpt2", "cl100k", "o200k", "tekken", "mistral")  # the models with a pre-token cache


def _tokenizer(model: str) -> Any:
    from ... import Tokenizer

    return {"gpt2": Tokenizer.gpt2, "cl100k": Tokenizer.cl100k_base, "o200k": Tokenizer.o200k_base,
            "tekken": Tokenizer.tekken, "mistral": Tokenizer.mistral_v1, "bert": Tokenizer.bert_base_uncased}[model]()


def _ours(model: str, cache_bytes: int | None = None) -> Callable[[str], Any]:
    tok = _tokenizer(model)
    if cache_bytes is not None:
        tok = tok.with_cache(cache_bytes)
    return tok.encode_ordinary if model in BPE_MODELS else lambda t: tok.encode(t, allowed_special="all")


def _regime_worker(model: str, name: str, texts_path: str, pin: int, tmp: str) -> dict[str, Any]:
    """In a fresh process on core `pin`: one implementation through the three regimes; times per chunk,
    and a digest of each chunk's ids (compared with the reference's in the parent)."""
    os.sched_setaffinity(0, {pin})
    texts = json.loads(Path(texts_path).read_text())
    f = _ours(model, 0) if name == NO_CACHE else MODELS[model](Path(tmp))[0][name]
    out: dict[str, Any] = {}
    for regime, batch in zip(REGIMES, (texts["seen"], texts["seen"], texts["unseen"])):
        times, got = [], []
        t_all = time.perf_counter()
        for text in batch:
            t0 = time.perf_counter_ns()
            got.append(f(text))
            times.append((time.perf_counter_ns() - t0) / 1000)
        wall = time.perf_counter() - t_all
        digests = [hashlib.blake2b(repr(_as_list(ids)).encode(), digest_size=16).hexdigest() for ids in got]
        out[regime] = {"us": times, "mb_per_s": round(sum(len(t.encode()) for t in batch) / wall / 1e6, 2),
                       "digests": digests}
    return out


def _as_list(ids: Any) -> list[int]:
    return ids.tolist() if hasattr(ids, "tolist") else list(ids)


def _run(run: Any, env: Any) -> None:
    """The suite's body (harness.Run): every model's four measurements."""
    quick, extra, results = run.options.quick, run.options.extra, run.results
    core, rounds, chunks_per_round = extra["core"], extra["rounds"], extra["chunks"]
    threads, models = extra["threads"], extra["models"]
    # Peers read these at import: one thread each on the pinned core.
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    os.environ.setdefault("RAYON_RS_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import importlib.metadata as md

    from ... import Tokenizer, corpus

    all_cores = sorted(os.sched_getaffinity(0))
    pin = core if core is not None else all_cores[-1]
    os.sched_setaffinity(0, {pin})
    smoke = run.options.smoke  # a check that every figure comes and is right: the least text that makes one
    if quick:
        rounds, chunks_per_round = min(rounds, 1 if smoke else 2), min(chunks_per_round, 8 if smoke else 60)
    regime_chunks_wanted = min(extra["regime_chunks"], 8 if smoke else 60) if quick else extra["regime_chunks"]
    docs = corpus.build(300_000 if smoke else 2_000_000 if quick else corpus.MIN_BYTES)
    chunks = _chunks(docs, CHUNK_BYTES)
    random.Random(1).shuffle(chunks)
    need = rounds * chunks_per_round
    if len(chunks) < need:
        raise BadConfig(f"corpus gives {len(chunks)} distinct chunks, {need} needed")
    versions = {}
    for pkg in ("tiktoken", "tokenizers", "mistral-common", "sentencepiece", "fastokens", "tokie", "gigatoken", "riptoken",
                "toktok-rs", "quicktok-v1", "bpe-openai"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    results.meta.update({
        "pinned_core": pin, "peers": versions, "missing": {}, "rounds": rounds,
        "chunks_per_round": chunks_per_round, "corpus_bytes": sum(len(d.encode()) for d in docs),
        "unicode": Tokenizer.unicode_version(), "models": models,
    })
    run.progress.expect(len(models) * (rounds + 5))
    # Regimes: distinct chunks of a larger corpus (documents shuffled); the first half is seen (cold, then
    # warm), the second unseen. Each implementation runs them in a fresh process of its own.
    regime_docs = corpus.build(600_000 if smoke else 3_000_000 if quick else 24_000_000)
    random.Random(2).shuffle(regime_docs)
    regime_chunks = _chunks(regime_docs, CHUNK_BYTES)
    per_regime = min(regime_chunks_wanted, len(regime_chunks) // 2)
    results.meta["regime_chunks"] = per_regime
    with tempfile.TemporaryDirectory() as tmp:
        texts = Path(tmp) / "regime-texts.json"
        texts.write_text(json.dumps({"seen": regime_chunks[:per_regime],
                                     "unseen": regime_chunks[per_regime:2 * per_regime]}))
        for model in models:
            impls, missing, reference = MODELS[model](Path(tmp))
            results.meta["missing"].update({f"{model}/{k}": v for k, v in missing.items()})
            _bench_model(results, model, impls, reference, docs, chunks[:need], rounds, chunks_per_round, pin,
                         all_cores, threads, run.progress.step, WORST_CASE_BYTES[:1] if smoke else WORST_CASE_BYTES)
            every, mixture_count = GATE_SMOKE if smoke else GATE_QUICK if quick else (1, gate.MIXTURES)
            _bench_gate(results, model, impls, reference, gate.strings(GATE_FAMILIES[model], every, mixture_count))
            run.progress.step(f"{model} exactness gate")
            names = list(impls) + ([NO_CACHE] if model in BPE_MODELS else [])
            _bench_regimes(results, model, names, reference, str(texts), pin, tmp, run.progress.step)


def _bench_gate(results: Any, model: str, impls: dict[str, Callable[[str], Any]], reference: str,
                sets: dict[str, list[str]]) -> None:
    """Every implementation but the reference through the gate's sets: strings whose ids differ from the
    reference's, and those it refused (an exception: a peer's own limit, not a wrong answer)."""
    rows: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in impls if name != reference}
    for set_name, strings in sets.items():
        expected = [_as_list(impls[reference](s)) for s in strings]
        for name in rows:
            f, differing, refused, examples = impls[name], 0, 0, []
            for s, want in zip(strings, expected):
                try:
                    got = _as_list(f(s))
                except Exception:  # noqa: BLE001 - a peer's refusal of its input is reported, not raised
                    refused += 1
                    continue
                if got != want:
                    differing += 1
                    if len(examples) < GATE_EXAMPLES:
                        examples.append(repr(s[:GATE_EXAMPLE_CHARS]))
            rows[name][set_name] = {"compared": len(strings), "differing": differing, "refused": refused,
                                    "examples": examples}
        del expected
    for name, by_set in rows.items():
        results.add("gate", name, {"model": model}, {},
                    {"reference": reference, "sets": by_set, "passed": all(v["differing"] == 0 for v in by_set.values())})


def _bench_regimes(results: Any, model: str, names: list[str], reference: str, texts: str, pin: int, tmp: str,
                   progress: Callable[[str], None]) -> None:
    spawn = multiprocessing.get_context("spawn")
    runs = {}
    for name in names:
        with spawn.Pool(1) as pool:
            runs[name] = pool.apply(_regime_worker, (model, name, texts, pin, tmp))
    progress(f"{model} regimes: {len(names)} implementations, each in a fresh process")
    expected = runs[reference]["cold"]["digests"] + runs[reference]["unseen"]["digests"]
    for name, run in runs.items():
        cold, warm, unseen = (run[r] for r in REGIMES)
        chunks = len(cold["digests"])
        differing = sum(a != b for a, b in zip(cold["digests"] + unseen["digests"], expected))
        differing += sum(a != b for a, b in zip(warm["digests"], expected[:chunks]))
        metrics = {r: {"us_per_chunk": summarize(run[r]["us"], digits=2), "mb_per_s": run[r]["mb_per_s"]}
                   for r in REGIMES}
        results.add("regimes", name, {"model": model, "chunks_per_regime": chunks, "core": pin}, metrics,
                    {"reference": reference, "differing_chunks": differing, "compared": 3 * chunks})


def _bench_model(results: Any, model: str, impls: dict[str, Callable[[str], Any]], reference: str,
                 docs: list[str], chunks: list[str], rounds: int, chunks_per_round: int, pin: int,
                 all_cores: list[int], threads: list[int], progress: Callable[[str], None],
                 worst_sizes: Sequence[int] = WORST_CASE_BYTES) -> None:
    # 1. 8 KB chunks: fresh chunks every round, implementations interleaved.
    samples: dict[str, list[float]] = {n: [] for n in impls}
    wall: dict[str, list[float]] = {n: [] for n in impls}
    mismatches: dict[str, int] = {n: 0 for n in impls}
    for r in range(rounds):
        batch = chunks[r * chunks_per_round:(r + 1) * chunks_per_round]
        order = list(impls)
        random.Random(r).shuffle(order)
        outputs: dict[str, list[list[int]]] = {}
        for name in order:
            f, got = impls[name], []
            t_round = time.perf_counter()
            for text in batch:
                t0 = time.perf_counter_ns()
                ids = f(text)
                samples[name].append((time.perf_counter_ns() - t0) / 1000)
                got.append(ids)
            wall[name].append(time.perf_counter() - t_round)
            outputs[name] = [_as_list(x) for x in got]
        for name in impls:
            mismatches[name] += sum(a != b for a, b in zip(outputs[name], outputs[reference]))
        progress(f"{model} round {r + 1}/{rounds}: {len(batch)} fresh 8 KB chunks x {len(impls)} implementations")
    nbytes = sum(len(c.encode()) for c in chunks)
    for name in impls:
        results.add("chunk-8k", name, {"model": model, "chunks": len(chunks), "chunk_bytes": CHUNK_BYTES,
                                       "core": pin},
                    {"us_per_chunk": summarize(samples[name], digits=2), "mb_per_s": round(nbytes / sum(wall[name]) / 1e6, 2)},
                    {"reference": reference, "mismatched_chunks": mismatches[name], "compared": len(chunks)})

    # 2. Whole documents, each seen once per implementation.
    doc_bytes = sum(len(d.encode()) for d in docs)
    doc_out: dict[str, list[list[int]]] = {}
    doc_time: dict[str, float] = {}
    for name, f in impls.items():
        t0 = time.perf_counter()
        got = [f(d) for d in docs]
        doc_time[name] = time.perf_counter() - t0
        doc_out[name] = [_as_list(x) for x in got]
    for name in impls:
        bad = sum(a != b for a, b in zip(doc_out[name], doc_out[reference]))
        results.add("documents", name, {"model": model, "documents": len(docs), "bytes": doc_bytes, "core": pin},
                    {"mb_per_s": round(doc_bytes / doc_time[name] / 1e6, 2),
                     "tokens": sum(len(x) for x in doc_out[name])},
                    {"reference": reference, "mismatched_documents": bad, "compared": len(docs)})
    del doc_out
    progress(f"{model} whole documents")

    # 3. encode_batch scaling with threads (all cores allowed).
    os.sched_setaffinity(0, set(all_cores))
    ours = _tokenizer(model)
    base = None
    for t in threads:
        t0 = time.perf_counter()
        # As _ours: BPE models encode the text as ordinary text, WordPiece with its special tokens.
        ids, _ = ours.encode_batch(docs, num_threads=t, flat=True, allowed_special=() if model in BPE_MODELS else "all")
        dt = time.perf_counter() - t0
        base = base or dt
        results.add("batch-threads", "outboard", {"model": model, "threads": t, "documents": len(docs)},
                    {"mb_per_s": round(doc_bytes / dt / 1e6, 2), "speedup": round(base / dt, 2)},
                    {"tokens": int(len(ids))})
    os.sched_setaffinity(0, {pin})
    progress(f"{model} encode_batch threads")

    # 4. Worst case: no spaces at all, growing sizes (linear means time/KiB stays flat).
    rng = random.Random(5)
    for size in worst_sizes:
        text = "".join(rng.choices(string.ascii_lowercase, k=size))
        outs = {}
        params = {"model": model, "bytes": size, "input": "random letters, no spaces"}
        for name, f in impls.items():
            t0 = time.perf_counter()
            try:
                outs[name] = _as_list(f(text))
            except Exception as e:  # a peer's own limit (bpe-openai's wrapper takes under 10^6 characters): a row
                if name == "outboard":
                    raise
                results.add("worst-case", name, params, {}, {"reference": reference, "refused": f"{type(e).__name__}: {e}"})
                continue
            dt = time.perf_counter() - t0
            results.add("worst-case", name, params, {"ms": round(dt * 1000, 2), "us_per_kb": round(dt * 1e6 / (size / 1024), 2)},
                        {"reference": reference, "equal_to_reference": outs[name] == outs.get(reference, outs[name])})
    progress(f"{model} worst case")


def render(rows: list[dict[str, Any]], meta: dict[str, Any], directory: Path | None = None) -> str:
    lines = ["# Tokenizer benchmark", "",
             f"{meta['cpu']}, {meta['cores']} cores ({meta['virtualization']}), pinned to core {meta['pinned_core']}; "
             f"load {meta['load_before'][0]:.2f} before, {meta.get('load_after', [0])[0]:.2f} after. "
             "A small noisy VM: compare ratios within this run, not absolute figures across machines.", "",
             f"Peers: {', '.join(f'{k} {v}' for k, v in meta['peers'].items()) or 'none installed'}"
             + (f"; missing: {meta['missing']}" if meta["missing"] else "") + ". Exactness: each implementation's ids "
             "against the reference (tiktoken for GPT-2, cl100k and o200k, mistral-common for Tekken, sentencepiece "
             "for Mistral 7B, HF tokenizers for BERT) on the timed payloads."]
    titles = {"gpt2": "GPT-2 (r50k) byte-level BPE", "cl100k": "cl100k_base byte-level BPE",
              "o200k": "o200k_base byte-level BPE", "tekken": "Mistral Tekken (tekken_240911) byte-level BPE",
              "mistral": "Mistral 7B v0.1 SentencePiece BPE (tokenizer.model.v1)",
              "bert": "BERT uncased WordPiece"}
    for model in meta["models"]:
        by = lambda case: [r for r in rows if r["case"] == case and r["params"].get("model") == model]  # noqa: E731
        chunk = {r["impl"]: r for r in by("chunk-8k")}
        ours = chunk.get("outboard")
        lines += ["", f"## {titles[model]}", "", "### Fresh 8 KB chunks (distinct every round, interleaved)", "",
                  "| implementation | chunks differing / compared | p50 µs | p90 µs | p99 µs | MB/s | outboard speed-up (p50) |",
                  "|---|---|---|---|---|---|---|"]
        for name, r in chunk.items():
            m, c = r["metrics"], r["correctness"]
            ratio = m["us_per_chunk"]["p50"] / ours["metrics"]["us_per_chunk"]["p50"] if ours else 0
            lines.append(f"| {name} | {c['mismatched_chunks']} / {c['compared']} | {m['us_per_chunk']['p50']} | "
                         f"{m['us_per_chunk']['p90']} | {m['us_per_chunk']['p99']} | {m['mb_per_s']} | {ratio:.2f}× |")
        gated = {r["impl"]: r["correctness"] for r in by("gate")}
        regimes = by("regimes")
        if regimes:
            peers = [x for x in regimes if not x["impl"].startswith("outboard")]
            # Exact: passed the gate (the reference defines it) and gave the reference's ids on every chunk.
            exact = [x for x in peers if x["correctness"]["differing_chunks"] == 0 and (
                x["impl"] == x["correctness"]["reference"] or gated.get(x["impl"], {}).get("passed", False))]
            best = {r: max((x["metrics"][r]["mb_per_s"] for x in peers), default=0) for r in REGIMES}
            best_exact = {r: max((x["metrics"][r]["mb_per_s"] for x in exact), default=0) for r in REGIMES}
            lines += ["", f"### Regimes: cold, warm, unseen ({regimes[0]['params']['chunks_per_regime']} distinct "
                      "8 KB chunks each; every implementation in a fresh process)", "",
                      "Cold: the chunks once; warm: the same chunks again; unseen: chunks of other documents right "
                      "after. MB/s (p50 µs per chunk); outboard's ratios are to the fastest peer in that regime, and "
                      "to the fastest exact one (it passed the exactness gate below and differed on no chunk: "
                      + (", ".join(x["impl"] for x in exact) or "none") + ").", "",
                      "| implementation | chunks differing / compared | cold | warm | unseen |", "|---|---|---|---|---|"]
            for x in regimes:
                cells = []
                for r in REGIMES:
                    m = x["metrics"][r]
                    ratio = ""
                    if best[r] and x["impl"].startswith("outboard"):
                        ratio = f", {m['mb_per_s'] / best[r]:.2f}× fastest" + (
                            f", {m['mb_per_s'] / best_exact[r]:.2f}× fastest exact" if best_exact[r] else "")
                    cells.append(f"{m['mb_per_s']} ({m['us_per_chunk']['p50']} µs{ratio})")
                c = x["correctness"]
                lines.append(f"| {x['impl']} | {c['differing_chunks']} / {c['compared']} | " + " | ".join(cells) + " |")
        if gated:
            set_names = list(next(iter(gated.values()))["sets"])
            reference = next(iter(gated.values()))["reference"]
            lines += ["", f"### Exactness gate (against {reference})", "",
                      "Strings whose ids differ from the reference's, of those compared (refused: the implementation "
                      "raised, its own limit); the first few that differ.", "",
                      "| implementation | " + " | ".join(set_names) + " | passes | first differing |",
                      "|---|" + "---|" * (len(set_names) + 2)]
            for name, c in gated.items():
                cells = [f"{v['differing']} / {v['compared']}" + (f" ({v['refused']} refused)" if v["refused"] else "")
                         for v in c["sets"].values()]
                examples = ", ".join(e for v in c["sets"].values() for e in v["examples"])[:200]
                lines.append(f"| {name} | " + " | ".join(cells) + f" | {'yes' if c['passed'] else 'NO'} | "
                             f"{examples.replace('|', '&#124;')} |")
        lines += ["", "### Whole documents of the mixed corpus", "",
                  "| implementation | documents differing / compared | MB/s | tokens |", "|---|---|---|---|"]
        for r in by("documents"):
            lines.append(f"| {r['impl']} | {r['correctness']['mismatched_documents']} / {r['correctness']['compared']} | "
                         f"{r['metrics']['mb_per_s']} | {r['metrics']['tokens']} |")
        lines += ["", "### encode_batch scaling (outboard)", "", "| threads | MB/s | speed-up |", "|---|---|---|"]
        for r in by("batch-threads"):
            lines.append(f"| {r['params']['threads']} | {r['metrics']['mb_per_s']} | {r['metrics']['speedup']}× |")
        worst: dict[str, dict[int, dict[str, Any]]] = {}
        for r in by("worst-case"):
            worst.setdefault(r["impl"], {})[r["params"]["bytes"]] = {**r["metrics"], **r["correctness"]}
        sizes_run = sorted({b for sizes in worst.values() for b in sizes})
        if sizes_run:
            top = sizes_run[-1]
            lines += ["", "### Worst case: random letters, no spaces", "",
                      "| implementation | " + " | ".join(f"{b >> 10} KiB ms" for b in sizes_run)
                      + f" | µs/KiB at {top >> 10} KiB | equal to reference |", "|---|" + "---|" * (len(sizes_run) + 2)]
        def cell(sizes: dict[int, dict[str, Any]], size: int, metric: str) -> Any:
            v = sizes.get(size, {})
            return "refused" if "refused" in v else v.get(metric, float("nan"))

        for name, sizes in worst.items():
            ms = [cell(sizes, b, "ms") for b in sizes_run]
            eq = all(v.get("equal_to_reference") for v in sizes.values() if "refused" not in v)
            lines.append(f"| {name} | " + " | ".join(map(str, ms)) + f" | {cell(sizes, top, 'us_per_kb')} | "
                         f"{'yes' if eq else 'NO'} |")
    lines += ["", f"Reproduce: `{meta['command']}` (git {meta['git']})."]
    return "\n".join(lines)


def _models(text: str) -> list[str]:
    models = list(MODELS) if text == "all" else text.split(",")
    if unknown := [m for m in models if m not in MODELS]:
        raise BadConfig(f"--models: unknown {unknown}; choose from {', '.join(MODELS)} or all")
    return models


SUITE = Suite(
    name="tokenizer", title="Tokenizer benchmark", body=_run, render=render, uses_agent=False,
    help="byte-level BPE (GPT-2, cl100k, o200k, Tekken), SentencePiece BPE (Mistral 7B) and BERT WordPiece speed vs "
         "their exact and fastest peers", quick_help="a short run (about a minute)",
    options=[Option("--core", "core to pin to (default: the last one)", type=int),
             Option("--rounds", "rounds of fresh chunks", default=3, type=int),
             Option("--chunks", "distinct 8 KB chunks per round", default=200, type=int),
             Option("--threads", "thread counts for encode_batch scaling", default="1,2", parse=numbers("--threads", minimum=1)),
             Option("--models", "gpt2, cl100k, o200k, tekken, mistral, bert (comma-separated) or all", default="all",
                    parse=_models),
             Option("--regime-chunks", "distinct 8 KB chunks per regime (cold/warm and unseen)", default=1400,
                    type=int)])
