"""Suite ``serving``: an OpenAI-compatible chat-completions loop over the Hugging Face adapter
(``outboard.hf``), with the prompt's tokenization and the answer's streaming detokenization on the
host or on the agent, and what each costs the server's CPU per request.

The loop is an inference server's engine thread. Requests arrive as OpenAI chat-completion bodies
(JSON, ``"stream": true``; a system and a user message, a distinct prompt each; where the model's
format has tools, every other request is an agent's turn: OpenAI tool definitions, the assistant's
call and the tool's result, a distinct text, to answer from), all queued at the start. Each step
admits queued requests up to ``concurrency`` (parse the body, ``apply_chat_template``: the prompt's
ids), runs the stand-in model — it emits the next id of each running sequence's answer,
a distinct corpus text encoded before the run, and holds the thread ``step_ms`` without using the
CPU, as a GPU step does —, writes the text of the step before (each delta a server-sent
``chat.completion.chunk``, the last with its finish_reason, then ``data: [DONE]``), and submits
every running sequence's new id to the decoder in one call. On the host that text is decoded at once
and written in the same step; on the agent it is decoded during the next model step, so the server
never waits for it (a chunk goes out one step later). ``outboard-wait`` waits for it instead;
``outboard-ahead`` also tokenizes the prompts it admits during the model step
(``submit_chat_template``), each sequence running from the step after. The server is pinned to one
core, the agent to another.

Checked on the timed data: each request's prompt ids equal the host's ``apply_chat_template``, and the
text its chunks carry, parsed back, equals the host's decode of its answer ids. Columns: the server
process's CPU per request (every thread, ``process_time``), the agent session's, the time to the first
chunk and to the last from admission (p50, p99), and the prompt's ids.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import Future
from typing import Any

from ... import corpus
from ..._agent import LocalAgent
from ...client import connect
from ...errors import BadConfig
from ...hf import HFTokenizer
from ..consumer import Payloads
from ..declare import Case, Chart, Column, Goal, Impl, Measurement, Option, Options, Suite, numbers
from ..stats import summarize

MODELS = ("mistral-v3", "mistral-v1", "tekken")
SERVER_CORE, AGENT_CORE = 0, 1
SYSTEM = "You are a helpful assistant. Answer with care, and cite the text you were given."
#: The tools an agent's request offers (OpenAI's function definitions).
TOOLS = [{"type": "function", "function": {
    "name": "search_documents", "description": "Full-text search over the user's documents.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                    "limit": {"type": "integer", "minimum": 1}},
                   "required": ["query"]}}}]


def _serve(placement: str, detokenize: str | None = None, spin_us: int | None = None, pipeline: bool = True,
           ahead: bool = False):
    """Serving with tokenization on ``placement`` and detokenization on ``detokenize`` (None: the
    same); for the agent, over a connection whose waits busy-poll at most ``spin_us`` (None: the
    channel's default, adaptive), with each step's text taken after the next model step
    (``pipeline``) or waited for, and each admitted prompt's ids taken after the model step
    (``ahead``) or waited for."""
    def measure(env: ServingEnv, p: dict[str, Any]) -> Measurement:
        requests = env.requests(p)
        client = env.clients[spin_us] if placement == "agent" else None
        tok = HFTokenizer(env.model, placement=placement, client=client)
        try:
            decoder = tok.stream_decoder(detokenize)
            agent0 = client.stats()["cpu_ns"] if client else 0
            cpu0 = time.process_time()
            served = serve(tok, decoder, requests, p["concurrency"], p["step_ms"] / 1e3, pipeline, ahead)
            cpu_s = time.process_time() - cpu0
            agent_s = (client.stats()["cpu_ns"] - agent0) / 1e9 if client else 0.0
        finally:
            tok.close()
        host = env.host
        wrong_prompts = sum(s["prompt_ids"] != host.apply_chat_template(r["messages"], r.get("tools"))
                            for s, r in zip(served, (json.loads(body) for body, _ in requests)))
        wrong_texts = sum(_streamed_text(s["chunks"]) != host.decode(answer) for s, (_, answer) in zip(served, requests))
        n = len(requests)
        metrics = {"server_cpu_us_per_request": cpu_s * 1e6 / n, "agent_cpu_us_per_request": agent_s * 1e6 / n,
                   "first_chunk_ms": summarize([s["first_s"] * 1e3 for s in served]),
                   "last_chunk_ms": summarize([s["last_s"] * 1e3 for s in served]),
                   "prompt_ids": sum(len(s["prompt_ids"]) for s in served) / n,
                   "answer_ids": sum(len(a) for _, a in requests) / n}
        return Measurement(metrics, wrong_prompts == wrong_texts == 0,
                           {"requests": n, "wrong_prompt_ids": wrong_prompts, "wrong_streamed_texts": wrong_texts})
    return measure


def serve(tok: HFTokenizer, decoder: Any, requests: list[tuple[bytes, list[int]]], concurrency: int,
          step_s: float, pipeline: bool = True, ahead: bool = False) -> list[dict[str, Any]]:
    """The engine loop (see the module's notes); per request its prompt ids, its SSE chunks, and the
    seconds from its admission to its first and last chunk. ``pipeline``: a step's ids are submitted
    to the decoder and their text written when it is there (after the next model step, where the
    agent decodes them); otherwise the loop waits for it before the next step. ``ahead``: an admitted
    prompt is submitted (``submit_chat_template``) and its ids taken after the model step, its
    sequence running from the next one; otherwise the loop waits for them at admission."""
    waiting = list(range(len(requests)))[::-1]
    running: dict[int, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    created = int(time.time())

    def write(order: list[int], records: list[dict[str, Any]], finish: list[bool], texts: list[Any]) -> None:
        now = time.perf_counter()
        for i, r, text, last in zip(order, records, texts, finish):
            if not isinstance(text, str):
                raise text
            if text or last:
                delta = {"content": text} if r["chunks"] else {"role": "assistant", "content": text}
                r["chunks"].append(_chunk(i, created, r["model"], delta, "length" if last else None))
                r.setdefault("first_s", now - r["start"])
            if last:
                r["chunks"].append(b"data: [DONE]\n\n")
                r["last_s"] = now - r["start"]
                done[i] = r

    def admit(i: int, start: float, body: dict[str, Any], prompt: list[int]) -> None:
        running[i] = {"prompt_ids": prompt, "stream": decoder.open(), "at": 0, "start": start, "chunks": [],
                      "max": min(body["max_tokens"], len(requests[i][1])), "model": body["model"]}

    admitting: list[tuple[int, float, dict[str, Any], Future[Any]]] = []
    in_flight: tuple[int, list[int], list[dict[str, Any]], list[bool]] | None = None
    while waiting or running or admitting or in_flight:
        while waiting and len(running) + len(admitting) < concurrency:
            i = waiting.pop()
            body = json.loads(requests[i][0])
            start = time.perf_counter()
            if ahead:
                admitting.append((i, start, body, tok.submit_chat_template(body["messages"], body.get("tools"))))
            else:
                admit(i, start, body, tok.apply_chat_template(body["messages"], body.get("tools")))
        if running or admitting:
            time.sleep(step_s)  # the stand-in model's step: GPU time, the CPU idle
        for i, start, body, prompt in admitting:  # they join the next step
            admit(i, start, body, prompt.result())
        admitting.clear()
        if in_flight:
            ticket, *step = in_flight
            write(*step, decoder.result(ticket))
            in_flight = None
        if not running:
            continue
        order = list(running)
        records = [running[i] for i in order]
        steps, finish = [], []
        for i, r in zip(order, records):
            steps.append((r["stream"], requests[i][1][r["at"]:r["at"] + 1]))
            r["at"] += 1
            finish.append(r["at"] >= r["max"])
            if finish[-1]:
                del running[i]  # its place is free for the next admission
        ticket = decoder.submit(steps, finish=finish)
        texts = decoder.result(ticket, wait=not pipeline)
        if texts is None:
            in_flight = (ticket, order, records, finish)
        else:
            write(order, records, finish, texts)
    return [done[i] for i in range(len(requests))]


def _chunk(i: int, created: int, model: str, delta: dict[str, str], finish: str | None) -> bytes:
    body = {"id": f"chatcmpl-{i}", "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def _streamed_text(chunks: list[bytes]) -> str:
    """The answer a client reads from the chunks."""
    text = []
    for chunk in chunks:
        payload = chunk.removeprefix(b"data: ").strip()
        if payload != b"[DONE]":
            text.append(json.loads(payload)["choices"][0]["delta"].get("content", ""))
    return "".join(text)


def _model(value: str) -> str:
    if value not in MODELS:
        raise BadConfig(f"--model is {value!r}; expected one of {', '.join(MODELS)}")
    return value


LOOP = Case(
    "loop", "A streaming chat-completions loop: the server's CPU per request, tokenization on the host or the agent",
    sweep={"prompt_bytes": [1024, 16384], "concurrency": [16], "max_tokens": [64], "step_ms": [2], "requests": [96]},
    quick={"prompt_bytes": [2048], "requests": [24]},
    impls=[Impl("host", _serve("host")), Impl("outboard", _serve("agent")),
           Impl("outboard-encode", _serve("agent", detokenize="host")),
           Impl("outboard-sleep", _serve("agent", spin_us=0)),
           Impl("outboard-wait", _serve("agent", pipeline=False)),
           Impl("outboard-ahead", _serve("agent", ahead=True))],
    columns=[Column("server CPU µs/req", "server_cpu_us_per_request", 0),
             Column("agent CPU µs/req", "agent_cpu_us_per_request", 0),
             Column("first chunk ms p50", "first_chunk_ms.p50", 2), Column("first chunk ms p99", "first_chunk_ms.p99", 2),
             Column("last chunk ms p50", "last_chunk_ms.p50", 1), Column("prompt ids", "prompt_ids", 0),
             Column("answer ids", "answer_ids", 0)],
    reference="host", ratio_metric="server_cpu_us_per_request",
    also_ratio=("outboard-encode", "outboard-sleep", "outboard-wait", "outboard-ahead"),
    goal=Goal(1.0, {"prompt_bytes": 16384}),
    notes="Ratios: the server's CPU per request with the agent over the same run's with the host (below 1: the "
          "offload frees the server's CPU). `outboard` takes each step's text after the next model step; its "
          "prompt's ids it waits for as the client does by default (busy-polling up to 50 µs while answers come "
          "that fast), `outboard-sleep` sleeps at once (spin_us=0); `outboard-wait` also waits for each step's "
          "text before the next model step; `outboard-ahead` takes the prompts' ids after the model step (its "
          "sequences start a step later); `outboard-encode` tokenizes on the agent and detokenizes here. "
          "The goal applies to long prompts (16 KiB, a RAG request's context); short ones are reported as measured. "
          "Every placement does the same JSON and SSE work.")

SUITE = Suite(
    name="serving", title="Serving: an OpenAI-compatible streaming loop, tokenization on the host or the agent",
    cases=[LOOP],
    charts=[Chart("loop", "prompt_bytes", "server_cpu_us_per_request", "Server CPU per request", "µs")],
    setup=lambda options: ServingEnv(options),
    describe=lambda env: {"tokenizer": env.model, "server_core": env.server_core, "agent_core": env.agent_core},
    help="an OpenAI-compatible streaming chat loop: the server's CPU per request, host vs agent tokenization",
    quick_help="a short run (about half a minute: 2 KiB prompts, 24 requests per placement)",
    options=[Option("--model", f"the tokenizer: {', '.join(MODELS)}", default="mistral-v3", parse=_model),
             Option("--prompt-bytes", "prompt sizes in bytes, instead of the sweep's",
                    parse=numbers("--prompt-bytes", int, 1), sweep="prompt_bytes", metavar="N,..."),
             Option("--concurrency", "sequences running at once, instead of the sweep's",
                    parse=numbers("--concurrency", int, 1), sweep="concurrency", metavar="N,..."),
             Option("--requests", "requests per cell and placement", parse=numbers("--requests", int, 1),
                    sweep="requests", metavar="N")],
    notes=__doc__.split("\n\n", 1)[1].replace("\n", " ").strip())


class ServingEnv:
    """The agent (--agent's, else a local one on its own core, not spinning), two clients of it (waits
    that busy-poll as by default, and waits that sleep at once), the
    host's tokenizer that the answers are encoded with and checked against, and the corpus the
    distinct prompts and answers are cut from. The server (this process) is pinned to its core."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.model = options.extra.get("model") or MODELS[0]
        cores = sorted(os.sched_getaffinity(0))
        self.server_core = cores[SERVER_CORE % len(cores)]
        self.agent_core = cores[AGENT_CORE % len(cores)]
        self.payloads = Payloads("\n".join(corpus.build(2_000_000 if options.quick else 4_000_000)))
        self._agent: LocalAgent | None = None
        self._affinity = set(cores)

    def __enter__(self) -> ServingEnv:
        address = self.options.agent
        if address is None:
            self._agent = LocalAgent("--cores", str(self.agent_core), "--spin-us", "0",
                                     log_level=self.options.log_level).start()
            address = self._agent.address
        self.clients = {spin: connect(address, spin_us=spin) for spin in (None, 0)}
        self.host = HFTokenizer(self.model)
        os.sched_setaffinity(0, {self.server_core})
        return self

    def requests(self, p: dict[str, Any]) -> list[tuple[bytes, list[int]]]:
        """Fresh request bodies with the answer ids the stand-in model will emit."""
        out = []
        for i in range(p["requests"]):
            agent = self.host.chat_version != "v1" and i % 2  # its bytes half the user's, half the tool result's
            messages = [{"role": "system", "content": SYSTEM},
                        {"role": "user", "content": self.payloads.take(p["prompt_bytes"] // (2 if agent else 1))}]
            body = {"model": self.model, "messages": messages, "max_tokens": p["max_tokens"], "stream": True}
            if agent:
                call = {"id": f"call{i % 100_000:05d}", "type": "function", "function": {
                    "name": "search_documents", "arguments": json.dumps({"query": messages[1]["content"][:40]})}}
                messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                             {"role": "tool", "tool_call_id": call["id"],
                              "content": json.dumps({"hits": [self.payloads.take(p["prompt_bytes"] // 2)]})}]
                body["tools"] = TOOLS
            answer = self.host.encode(self.payloads.take(8 * p["max_tokens"]), add_special_tokens=False)
            out.append((json.dumps(body).encode(), answer[:p["max_tokens"]]))
        return out

    def __exit__(self, *exc: object) -> None:
        os.sched_setaffinity(0, self._affinity)
        self.host.close()
        for client in self.clients.values():
            client.close()
        if self._agent is not None:
            self._agent.stop()
