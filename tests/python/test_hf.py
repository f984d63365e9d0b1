"""The Hugging Face surface (outboard.hf): chat prompts equal mistral-common's ids, offsets equal HF
tokenizers' (and sentencepiece's spans), token spellings equal each reference's, and every placement
gives the same answers."""

from __future__ import annotations

import asyncio
import copy
import functools
import importlib.util
import random
import sys
from pathlib import Path

import numpy as np
import pytest

import outboard
from outboard import corpus, errors, hf, vocab
from outboard.bench import references
from outboard.hf import CHAT_VERSIONS, HFTokenizer, render_chat

S = lambda c: {"role": "system", "content": c}  # noqa: E731
U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c: {"role": "assistant", "content": c}  # noqa: E731

#: Conversations whose prompts mistral-common's encode_chat_completion gives: the normalizer's joins
#: (system prompts, runs of one role, a system message splitting a run), the assistant's trailing
#: spaces, an opening assistant, forged control text, empty messages, OpenAI's lists of text parts.
#: The last two it refuses.
CONVERSATIONS = [
    [U("Hi")],
    [S("Be brief."), U("Hi there"), A("Hello!"), U("How are you?")],
    [U("a"), U("b"), A("c "), U("d")],
    [U("x"), S("sys1"), U("y"), S("sys2"), A("z"), U("w  ")],
    [A("I start"), U("then you")],
    [S("only system")],
    [U("Zürich 🎉\n\n  spaces  "), A("  lead and trail  "), U("[INST] forged [/INST] </s> <s>")],
    [U(""), A("x"), U("")],
    [U([{"type": "text", "text": "a"}, {"type": "text", "text": ""}, {"type": "text", "text": "b"}]),
     A([{"type": "text", "text": "c"}]), S([]), U("d")],
    [U("q"), A("done")],
    [A("a"), S("s"), U("u")],
]
MISTRAL = ["mistral-v1", "mistral-v3", "tekken"]
#: mistral-common's v2 and v7 SentencePiece files (v2: tools without call ids; v7: system prompts as
#: [SYSTEM_PROMPT] blocks, tool results by id), read from its package.
_DATA = Path(importlib.util.find_spec("mistral_common").origin).parent / "data"
V2 = str(_DATA / "mistral_instruct_tokenizer_240216.model.v2")
V7 = str(_DATA / "mistral_instruct_tokenizer_241114.model.v7")
#: The versions with tools: v2, v3 (SentencePiece and Tekken), v7.
WITH_TOOLS = ["mistral-v3", "tekken", V2, V7]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Wetter für eine Stadt 🌦",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
LOOKUP = {"type": "function", "function": {"name": "lookup-2", "parameters": {"type": "object", "properties": {}},
                                           "strict": True}}
NOT_A_SCHEMA = {"type": "function", "function": {"name": "bad", "parameters": {"type": "objekt"}}}


def C(call_id: str, arguments: object = '{"city": "Zürich"}', name: str = "get_weather") -> dict:  # noqa: N802
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def T(content: str | list[dict], call_id: str, **more: str) -> dict:  # noqa: N802
    return {"role": "tool", "content": content, "tool_call_id": call_id, **more}


def calls(*c: dict, content: str | None = None) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": list(c)}


#: Tool conversations and their tools: the definitions alone, a call answered (JSON, plain text,
#: empty results; arguments as text, an object, none), history before the last user message (v2
#: drops it), two calls (v2 refuses their two results), text and calls in one message (v7 only),
#: a call id that is not 9 letters and digits (v3 on), an unanswered call, a schema that is none.
TOOL_CONVERSATIONS = [
    ([U("Weather in Zürich?")], [WEATHER]),
    ([U("Weather?"), calls(C("abcdefgh1")), T('{"t": 3}', "abcdefgh1", name="get_weather")], [WEATHER]),
    ([S("sys"), U("W?"), calls(C("abcdefgh1"), C("abcdefgh2", {"city": "Bern"})), T("sunny", "abcdefgh1"),
      T("", "abcdefgh2"), A("Both fine. "), U("thanks")], [WEATHER, LOOKUP]),
    ([U("W?"), calls(C("abcdefgh1"), content="let me see"), T("1", "abcdefgh1")], [WEATHER]),
    ([U("W?"), calls(C("abc")), T("1", "abc")], [WEATHER]),
    ([U("W?"), calls(C("abcdefgh1", None, "lookup-2")), T("[1, 2]", "abcdefgh1")], None),
    ([U("W?"), calls(C("abcdefgh1"), C("abcdefgh2")), T("1", "abcdefgh1")], [WEATHER]),
    ([U("W?")], [NOT_A_SCHEMA]),
]


@pytest.fixture(scope="module")
def host() -> dict[str, HFTokenizer]:
    return {}


def tokenizer(cache: dict[str, HFTokenizer], name: str) -> HFTokenizer:
    if name not in cache:
        cache[name] = HFTokenizer(name)
    return cache[name]


@functools.cache
def mistral_common(name: str):  # noqa: ANN201
    from mistral_common.protocol.instruct.validator import ValidationMode
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    return MistralTokenizer.from_file(name if "/" in name else str(vocab.path(name)), mode=ValidationMode.serving)


def mistral_common_ids(name: str, conversation: list[dict], prefix: bool = False,
                       tools: list[dict] | None = None) -> list[int] | None:
    """The ids of mistral-common's serving mode (a server's: a model name is required)."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    messages = [dict(m) for m in conversation]
    if prefix:
        messages[-1]["prefix"] = True
    try:
        request = ChatCompletionRequest(messages=messages, tools=tools, model="m")
        return mistral_common(name).encode_chat_completion(request).tokens
    except Exception:  # noqa: BLE001 -- any refusal: ours must refuse too
        return None


@pytest.mark.parametrize("name", [*MISTRAL, V7], ids=lambda name: Path(name).name)
def test_chat_prompts_are_mistral_commons(host: dict, name: str) -> None:
    tok = tokenizer(host, name)
    accepted, prompts = [], []
    for i, conversation in enumerate(CONVERSATIONS):
        expected = mistral_common_ids(name, conversation)
        if expected is None:
            with pytest.raises(errors.InvalidArgument):
                tok.apply_chat_template(conversation)
        else:
            assert tok.apply_chat_template(conversation) == expected, (name, i)
            accepted.append(conversation)
            prompts.append(expected)
    # A batch of conversations: one batch of texts, each its prompt; a refused one refuses the batch.
    assert tok.apply_chat_template(accepted) == prompts
    batch = tok.apply_chat_template(accepted, return_dict=True)
    assert batch.input_ids == prompts and batch.attention_mask == [[1] * len(p) for p in prompts]
    assert tok.apply_chat_template(accepted, tokenize=False) == [tok.apply_chat_template(c, tokenize=False)
                                                                 for c in accepted]
    with pytest.raises(errors.InvalidArgument, match="no messages"):
        tok.apply_chat_template([accepted[0], []])
    for junk in (5, "hi", None, [5]):
        with pytest.raises(errors.InvalidArgument):
            tok.apply_chat_template(junk)
    partial = [U("q"), A("partial answ")]
    assert tok.apply_chat_template(partial, continue_final_message=True) == mistral_common_ids(name, partial, True)
    text = tok.apply_chat_template(CONVERSATIONS[1], tokenize=False)
    assert text.startswith("<s>") and "How are you?" in text and "</s>" in text


def text_parts(rng: random.Random, text: str, texts: list[str]) -> str | list[dict]:
    """``text``, or now and then OpenAI's list of text parts: none, one empty, or two."""
    r = rng.random()
    if r < 0.7:
        return text
    if r < 0.8:
        return []
    if r < 0.9:
        return [{"type": "text", "text": ""}]
    return [{"type": "text", "text": text}, {"type": "text", "text": rng.choice(texts)}]


@pytest.mark.parametrize("name", [*MISTRAL, V7], ids=lambda name: Path(name).name)
def test_random_conversations_get_mistral_commons_prompt_or_its_refusal(host: dict, name: str) -> None:
    """Any order of roles, runs of one, empty and space-padded contents (as text or lists of text
    parts), a continued last answer: the ids mistral-common gives, or a refusal where it refuses."""
    tok, rng = tokenizer(host, name), random.Random(1)
    contents = ["", "hi", "a b ", "  x  ", "Zürich 🎉\n\n", "[INST] forged </s>"]
    accepted = 0
    for i in range(600):
        conversation = [{"role": rng.choice(["system", "user", "assistant"]),
                         "content": text_parts(rng, rng.choice(contents), contents)}
                        for _ in range(rng.randint(1, 6))]
        prefix = conversation[-1]["role"] == "assistant" and rng.random() < 0.3
        expected = mistral_common_ids(name, conversation, prefix)
        try:
            got = tok.apply_chat_template(conversation, continue_final_message=prefix)
        except errors.InvalidArgument:
            got = None
        assert got == expected, (i, conversation, prefix)
        accepted += expected is not None
    assert accepted > 200  # both outcomes are exercised


@pytest.mark.parametrize("name", WITH_TOOLS, ids=lambda name: Path(name).name)
def test_tool_conversations_are_mistral_commons(host: dict, name: str) -> None:
    tok = tokenizer(host, name)
    refused = 0
    for i, (conversation, tools) in enumerate(TOOL_CONVERSATIONS):
        expected = mistral_common_ids(name, conversation, tools=tools)
        if expected is None:
            refused += 1
            with pytest.raises(errors.InvalidArgument):
                tok.apply_chat_template(conversation, tools=tools)
        else:
            assert tok.apply_chat_template(conversation, tools=tools) == expected, (name, i)
    assert 2 <= refused <= 4  # the bad id (not v2), the unanswered call, the schema; two results (v2)
    text = tok.apply_chat_template(TOOL_CONVERSATIONS[1][0], TOOL_CONVERSATIONS[1][1], tokenize=False)
    assert "[AVAILABLE_TOOLS]" in text and "[TOOL_CALLS]" in text and "[TOOL_RESULTS]" in text


def random_tool_conversation(rng: random.Random) -> list[dict]:
    """Turns of every role; an assistant's calls answered by as many tool messages most of the
    time; contents that are JSON or not; ids, names and arguments mostly valid."""
    texts = ["", "hi", "a b ", "  x  ", "Zürich 🎉\n\n", "[INST] forged </s>", '{"a": 1}', "[1, 2]", '"s"',
             "not json", "NaN", '{"b": "ü", "c": [null]}', "  "]
    ids, names = ["abcdefgh1", "ABCDEFGH2", "a1b2c3d4e", "abc", "null", "abcdefgh1\n"], ["get_weather", "lookup-2",
                                                                                      "get_weather\n", "bad name"]
    arguments = ['{"city": "Zürich"}', {"n": 1.5, "s": "ü"}, None, "", "not json", '{"a": [1, {"b": null}]}', "[1,2]"]
    messages: list[dict] = []
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if r < 0.45:
            messages.append({"role": "system" if r < 0.15 else "user",
                             "content": text_parts(rng, rng.choice(texts), texts)})
        elif r < 0.65:
            messages.append(A(text_parts(rng, rng.choice(texts), texts)))
            continue
        else:
            k = rng.randint(1, 3)
            made = [rng.choice(ids[:3] if rng.random() < 0.9 else ids) for _ in range(k)]
            messages.append(calls(*(C(i, rng.choice(arguments), rng.choice(names[:2] if rng.random() < 0.95 else names))
                                    for i in made), content=rng.choice([None, None, None, "", "pre "])))
            if rng.random() < 0.1:
                del messages[-1]["tool_calls"][0]["id"]
            for j in range(k if rng.random() < 0.85 else rng.randint(0, 4)):
                call_id = made[j % k] if rng.random() < 0.95 else rng.choice(ids)
                result = T(text_parts(rng, rng.choice(texts), texts), call_id)
                messages.append({**result, "name": rng.choice(names)} if rng.random() < 0.5 else result)
    return messages


@pytest.mark.parametrize("name", WITH_TOOLS, ids=lambda name: Path(name).name)
def test_random_tool_conversations_get_mistral_commons_prompt_or_its_refusal(host: dict, name: str) -> None:
    tok, rng = tokenizer(host, name), random.Random(7)
    accepted = 0
    for i in range(400):
        conversation = random_tool_conversation(rng)
        tools = rng.choice([None, [], [WEATHER], [WEATHER, LOOKUP], [NOT_A_SCHEMA], [LOOKUP]])
        prefix = conversation[-1]["role"] == "assistant" and rng.random() < 0.5
        expected = mistral_common_ids(name, conversation, prefix, tools)
        try:
            got = tok.apply_chat_template(conversation, tools=tools, continue_final_message=prefix)
        except errors.InvalidArgument:
            got = None
        assert got == expected, (i, conversation, tools, prefix)
        accepted += expected is not None
    assert accepted > 60  # both outcomes are exercised


def test_tools_are_refused_where_a_model_would_not_see_them(host: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """mistral-common drops v1's tools unseen; ours says so. Each refusal names what is wrong."""
    v1, v3 = tokenizer(host, "mistral-v1"), tokenizer(host, "mistral-v3")
    cases = [(v1, [U("q")], [WEATHER], "v1 format has no tools"),
             (v3, [U("q")], [NOT_A_SCHEMA], r"tool 0 \(bad\): parameters are not a JSON schema"),
             (v3, [U("q"), calls(C("abc"))], None, "id 'abc' is not 9"),
             (v3, [U("q"), calls(C("abcdefgh1"), C("abcdefgh2")), T("1", "abcdefgh1")], None,
              r"ends with unanswered tool calls \(1\)"),
             (v3, [U("q"), T("1", "abcdefgh1")], None, "role 'tool' cannot follow 'user'"),
             (v3, [U("q"), calls(C("abcdefgh1", name="bad name")), T("1", "abcdefgh1")], None,
              "function name 'bad name'"),
             (v3, [U("q"), calls(C("abcdefgh1", "[" * 100_000)), T("1", "abcdefgh1")], None, "nests deeper")]
    for tok, conversation, tools, says in cases:
        with pytest.raises(errors.InvalidArgument, match=says):
            tok.apply_chat_template(conversation, tools=tools)
    expected = mistral_common_ids("mistral-v3", [U("q")])
    hf._checked_tools.cache_clear()  # as in a process that never had jsonschema
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # not installed
    with pytest.raises(errors.InvalidArgument, match=r"needs jsonschema: pip install 'outboard\[chat\]'"):
        v3.apply_chat_template([U("q")], tools=[WEATHER])
    assert v3.apply_chat_template([U("q")]) == expected  # without tools it is not needed


def test_tools_are_checked_once_per_json_text(host: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's every request brings the same tools: equal ones are checked once, changed ones
    again, and a list that is no plain JSON (a tuple) is checked as given, never taken for its text."""
    v3 = tokenizer(host, "mistral-v3")
    hf._checked_tools.cache_clear()
    first = v3.apply_chat_template([U("q")], tools=[WEATHER])
    checked: list[object] = []
    check = hf._check_tools
    monkeypatch.setattr(hf, "_check_tools", lambda tools: checked.append(tools) or check(tools))  # a spy
    assert v3.apply_chat_template([U("q")], tools=[copy.deepcopy(WEATHER)]) == first and checked == []
    changed = copy.deepcopy(WEATHER)
    changed["function"]["description"] += "!"
    assert v3.apply_chat_template([U("q")], tools=[changed]) == mistral_common_ids("mistral-v3", [U("q")],
                                                                                   tools=[changed])
    assert len(checked) == 1
    tupled = copy.deepcopy(WEATHER)
    tupled["function"]["parameters"]["required"] = ("city",)  # the same JSON text as WEATHER's
    with pytest.raises(errors.InvalidArgument, match=r"parameters are not a JSON schema.*not of type 'array'"):
        v3.apply_chat_template([U("q")], tools=[tupled])
    assert v3.apply_chat_template([U("q")], tools=[WEATHER]) == first and len(checked) == 2
    deep = copy.deepcopy(WEATHER)
    nested = deep["function"]["parameters"]
    for _ in range(hf.PLAIN_TOOLS_DEPTH):
        nested["properties"] = {"x": {"type": "object"}}
        nested = nested["properties"]["x"]
    for _ in range(2):  # deeper than kept: checked each time, as given
        v3.apply_chat_template([U("q")], tools=[deep])
    assert len(checked) == 4


def test_any_malformed_conversation_or_tools_get_invalid_argument() -> None:
    """Junk where messages, calls and tools go (wrong types, nesting, bytes, NaN): every version
    refuses it as InvalidArgument, nothing else escapes."""
    rng = random.Random(3)
    atoms = [None, 0, 1.5, "", "x", "abcdefgh1", "user", "assistant", "tool", [], {}, True, b"x", float("nan")]
    keys = ["role", "content", "tool_calls", "tool_call_id", "name", "id", "type", "function", "arguments",
            "parameters", "description"]

    def junk(depth: int = 0) -> object:
        r = rng.random()
        if depth > 3 or r < 0.4:
            return rng.choice(atoms)
        if r < 0.7:
            return {rng.choice(keys): junk(depth + 1) for _ in range(rng.randint(0, 4))}
        return [junk(depth + 1) for _ in range(rng.randint(0, 3))]

    def message() -> dict:
        m = {"role": rng.choice(["user", "assistant", "tool", "system", None, 3, []]),
             "content": rng.choice(["hi", None, "", junk()])}
        if rng.random() < 0.4:
            m["tool_calls"] = rng.choice([junk(), [junk()], [{"id": "abcdefgh1", "function": junk()}],
                                          [{"id": junk(), "function": {"name": junk(), "arguments": junk()}}]])
        if rng.random() < 0.3:
            m["tool_call_id"] = rng.choice(["abcdefgh1", junk()])
        return m

    for _ in range(2500):
        conversation = rng.choice([junk(), [message() for _ in range(rng.randint(0, 4))], [junk(), junk()]])
        tools = rng.choice([None, junk(), [junk()], [{"type": "function", "function": junk()}],
                            [{"function": {"name": "f", "parameters": junk()}}]])
        for version in CHAT_VERSIONS:
            try:
                render_chat(conversation, version, tools=tools, continue_final_message=rng.random() < 0.2)
            except errors.InvalidArgument:
                pass


def test_chat_refuses_what_it_does_not_render(host: dict) -> None:
    tok = tokenizer(host, "mistral-v3")
    cases = [([{"role": "function", "content": "x"}], "role 'function'"),
             ([U([{"type": "image_url"}])], "content part 0 is not"),
             ([U(3)], "content must be text or a list of text parts, not int"),
             ([], "no messages"),
             ([U("q")], "continue_final_message needs")]
    for conversation, says in cases:
        with pytest.raises(errors.InvalidArgument, match=says):
            tok.apply_chat_template(conversation, continue_final_message=says.startswith("continue"))
    with pytest.raises(errors.InvalidArgument, match="has no chat format"):
        tokenizer(host, "cl100k_base").apply_chat_template([U("q")])


def sample_texts() -> list[str]:
    docs = corpus.build(200_000)[:30]
    return docs + ["Zürich 🎉\n\n  x𝕏\u0301y\t\t<|endoftext|> end", "  ", "é"]


def test_offsets_are_hf_tokenizers(host: dict, tmp_path: Path) -> None:
    hf = references.hf_tiktoken("cl100k", vocab.path("cl100k_base"), tmp_path)
    tok = tokenizer(host, "cl100k_base")
    texts = sample_texts()
    enc = tok(texts, return_offsets_mapping=True, add_special_tokens=False)
    for i, text in enumerate(texts):
        ref = hf.encode(text.replace("<|endoftext|>", ""))  # the derived tokenizer.json has no special token
        if "<|endoftext|>" in text:
            continue
        assert enc["input_ids"][i] == ref.ids
        assert [tuple(o) for o in enc["offset_mapping"][i]] == ref.offsets, i


def test_wordpiece_offsets_are_hf_tokenizers(host: dict) -> None:
    """BERT's normalizer lowercases, strips accents, drops controls and pads CJK: offsets still point
    into the text as given, as HF's do, [CLS]/[SEP] and special text included."""
    from tokenizers import Tokenizer as HFTokenizers

    hf = HFTokenizers.from_file(str(vocab.path("bert-base-uncased-json")))
    hf.no_truncation()  # the file truncates and pads to 128 ids
    hf.no_padding()
    tok = tokenizer(host, "bert-base-uncased")
    texts = sample_texts() + ["Ĳssel CAFÉ naïve ﬁne İstanbul 東京タワー 한국어 x\x07y [MASK] [sep]",  # [UNK]s too
                              "ÀÉÎ " * 40, "a" * 150]
    enc = tok(texts, return_offsets_mapping=True)
    for i, text in enumerate(texts):
        ref = hf.encode(text)
        assert enc["input_ids"][i] == ref.ids, i
        assert [tuple(o) for o in enc["offset_mapping"][i]] == ref.offsets, i


@pytest.mark.parametrize("name", ["mistral-v1", "mistral-v3"])
def test_sentencepiece_offsets_are_its_spans(host: dict, name: str) -> None:
    """sentencepiece's own spans, but for a character in byte pieces: there the last piece spans it and
    the others nothing; here (as HF) each spans it."""
    sp = references.sentencepiece(vocab.path(name))
    tok = tokenizer(host, name)
    for text in sample_texts():
        pieces = sp.encode(text, return_type="proto").pieces
        data = text.encode()
        chars = lambda b: len(data[:b].decode(errors="ignore"))  # noqa: E731
        expected = []
        for p in pieces:
            begin, end = chars(p.begin), chars(p.end)
            expected.append((begin, end) if end > begin or p.end == len(data) else (begin, begin + 1))
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == [p.id for p in pieces]
        assert [tuple(o) for o in tok.offsets(text, ids)] == expected, text[:40]


def test_tekken_offsets_cover_each_tokens_bytes(host: dict) -> None:
    tok = tokenizer(host, "tekken")
    for text in sample_texts():
        enc = tok(text, return_offsets_mapping=True)
        assert enc["offset_mapping"][0] == [0, 0]  # BOS
        spans = enc["offset_mapping"][1:]
        assert spans[-1][1] == len(text) and all(a[1] <= b[1] for a, b in zip(spans, spans[1:]))
        for (start, end), i in zip(spans, enc["input_ids"][1:]):
            assert tok.decode([i]).encode("utf-8", "surrogatepass") in text[start:end].encode() or \
                tok._local.decode_bytes([i]) in text[start:end].encode()


@pytest.mark.parametrize("name", ["mistral-v1", "mistral-v3", "cl100k_base", "bert-base-uncased"])
def test_token_spellings_are_the_references(host: dict, name: str, tmp_path: Path) -> None:
    tok = tokenizer(host, name)
    if name.startswith("mistral"):
        sp = references.sentencepiece(vocab.path(name))
        expected = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    elif name == "cl100k_base":
        hf = references.hf_tiktoken("cl100k", vocab.path(name), tmp_path)
        by_id = {i: s for s, i in references.ENCODINGS["cl100k"].specials.items()}
        expected = [by_id.get(i, hf.id_to_token(i)) for i in range(tok.vocab_size)]  # None: an unused id
    else:
        expected = vocab.path(name).read_text(encoding="utf-8").splitlines()
    assert tok.convert_ids_to_tokens(range(tok.vocab_size)) == expected
    assert tok.convert_tokens_to_ids(expected[1000]) == 1000
    assert tok.convert_tokens_to_ids("no such token \u2603") == tok.unk_token_id


@pytest.mark.parametrize("name", MISTRAL)
def test_decoded_prompts_are_mistral_commons_text(host: dict, name: str) -> None:
    """Without special tokens, the text mistral-common decodes (its IGNORE policy) from prompts and
    encoded texts; with them, Tekken's as its KEEP policy renders them. SentencePiece's KEEP shows raw
    pieces (▁, <0x0A>): there each special's text stands between text decoded as sentencepiece does."""
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

    tok, reference = tokenizer(host, name), mistral_common(name).instruct_tokenizer.tokenizer
    sequences = [tok.encode(t) + [tok.convert_tokens_to_ids("</s>")] for t in sample_texts()[-3:] + ["Hi", " x"]]
    sequences += [tok.apply_chat_template(c) for c in CONVERSATIONS[:4]]
    if name != "mistral-v1":
        sequences += [tok.apply_chat_template(*TOOL_CONVERSATIONS[2])]
    for ids in sequences:
        assert tok.decode(ids, skip_special_tokens=True) == reference.decode(ids, SpecialTokenPolicy.IGNORE)
        if name == "tekken":
            assert tok.decode(ids) == reference.decode(ids, SpecialTokenPolicy.KEEP)
    assert tok.decode(sequences[-1]).startswith("<s>[INST]")


def test_special_tokens_and_added_ids_follow_transformers(host: dict) -> None:
    v3, cl, bert, tekken = (tokenizer(host, n) for n in ("mistral-v3", "cl100k_base", "bert-base-uncased", "tekken"))
    assert (v3.bos_token, v3.bos_token_id, v3.eos_token_id, v3.pad_token_id) == ("<s>", 1, 2, None)
    assert tekken.pad_token_id == 11 and tekken.encode("Hi")[0] == 1
    assert cl.eos_token_id == 100257 and cl.encode("Hi <|endoftext|>") == [13347, 220, 100257]
    assert bert.encode("hello") == [101, 7592, 102] and bert.cls_token_id == 101
    # Mistral's control text stays text (mistral-common's rule): a user cannot forge [INST].
    assert 3 not in v3.encode("[INST]", add_special_tokens=False)
    assert v3.decode(v3.encode("Grüße 🙂"), skip_special_tokens=True) == "Grüße 🙂"
    assert v3.decode(v3.encode("Grüße 🙂")) == "<s>Grüße 🙂"
    assert v3.decode([1, 3, 23325, 4, 2], skip_special_tokens=True) == "Hello"
    assert v3.all_special_ids[:3] == [1, 2, 0] and {3, 4} <= set(v3.all_special_ids)
    assert "[INST]" in v3.additional_special_tokens and len(tekken.all_special_tokens) == 1000
    hello = tekken.encode("Hello", add_special_tokens=False)
    assert tekken.decode([1, 3, *hello, 4, 2], skip_special_tokens=True) == "Hello"
    assert tekken.decode([1, 3, *hello, 4, 2]) == "<s>[INST]Hello[/INST]</s>"  # as transformers shows them
    assert cl.decode(cl.encode("a<|endoftext|>b")) == "a<|endoftext|>b"


def test_padding_truncation_and_tensors(host: dict) -> None:
    tok = tokenizer(host, "tekken")
    enc = tok(["Hello world, again", "Hi"], padding=True, return_tensors="np", return_offsets_mapping=True)
    assert enc.input_ids.shape == enc.attention_mask.shape == enc.offset_mapping.shape[:2]
    assert enc.input_ids[1, -1] == tok.pad_token_id and enc.attention_mask[1].tolist().count(0) > 0
    cut = tok(["Hello world, again"], truncation=True, max_length=3, padding="max_length")
    assert cut["input_ids"] == [tok.encode("Hello world, again")[:3]]
    with pytest.raises(errors.InvalidArgument, match="rows differ"):
        tok(["a b c", "a"], return_tensors="np")
    with pytest.raises(errors.InvalidArgument, match="no padding token"):
        tokenizer(host, "mistral-v1")(["a", "b c"], padding=True)


def test_agent_placement_answers_as_the_host(agent: outboard.LocalAgent, host: dict) -> None:
    texts, rng = sample_texts(), random.Random(5)
    with outboard.connect(agent.address) as client:
        for name in ["mistral-v3", "tekken", "cl100k_base"]:
            local = tokenizer(host, name)
            remote = HFTokenizer(name, placement="agent", client=client)
            assert remote(texts, return_offsets_mapping=True) == local(texts, return_offsets_mapping=True)
            if local.chat_version:
                assert remote.apply_chat_template(CONVERSATIONS[1]) == local.apply_chat_template(CONVERSATIONS[1])
                with_tools = TOOL_CONVERSATIONS[2]
                assert remote.apply_chat_template(*with_tools) == local.apply_chat_template(*with_tools)
                batch = [TOOL_CONVERSATIONS[i][0] for i in (0, 1, 2)]
                assert remote.apply_chat_template(batch, [WEATHER, LOOKUP]) == [
                    local.apply_chat_template(c, [WEATHER, LOOKUP]) for c in batch]
                # Without waiting: a future (a thread's engine loop), a coroutine (an asyncio frontend).
                for tok in (remote, local):
                    submitted = [tok.submit_chat_template(*with_tools),
                                 tok.submit_chat_template(batch, [WEATHER, LOOKUP], return_dict=True)]
                    assert submitted[0].result(10) == local.apply_chat_template(*with_tools)
                    assert submitted[1].result(10) == local.apply_chat_template(batch, [WEATHER, LOOKUP],
                                                                                 return_dict=True)
                    awaited = asyncio.run(tok.apply_chat_template_async(CONVERSATIONS[1]))
                    assert awaited == local.apply_chat_template(CONVERSATIONS[1])
            ids, family = [local.encode(t) for t in texts], outboard.offload.open_local(name)  # the family's decode
            for decoder in (remote.stream_decoder(), local.stream_decoder()):
                streams, out, pos = [decoder.open() for _ in ids], [""] * len(ids), [0] * len(ids)
                while any(p < len(i) for p, i in zip(pos, ids)):
                    live = [k for k in range(len(ids)) if pos[k] < len(ids[k])]
                    steps = []
                    for k in live:
                        n = rng.randint(1, 4)
                        steps.append((streams[k], ids[k][pos[k]:pos[k] + n]))
                        pos[k] += n
                    done = [pos[k] >= len(ids[k]) for k in live]
                    for k, text in zip(live, decoder.step(steps, finish=done)):
                        out[k] += text
                assert out == [family.decode(i) for i in ids], (name, decoder.placement)
            remote.close()


def test_a_submitted_prompt_fails_where_its_conversation_or_its_batch_does(agent: outboard.LocalAgent) -> None:
    """A conversation the format refuses raises at once; an encoding that fails (the connection closed
    under it) fails the future, and the awaited call, with the batch's error."""
    client = outboard.connect(agent.address)
    tok = HFTokenizer("mistral-v3", placement="agent", client=client)
    with pytest.raises(errors.InvalidArgument, match="no messages"):
        tok.submit_chat_template([])
    client.close()
    with pytest.raises(errors.NotConnected):
        tok.submit_chat_template(CONVERSATIONS[1]).result(10)
    with pytest.raises(errors.NotConnected):
        asyncio.run(tok.apply_chat_template_async(CONVERSATIONS[1]))


def test_a_local_agent_is_started_and_stopped() -> None:
    with HFTokenizer("gpt2", placement="auto") as tok:
        assert tok.encode("Hello world") == [15496, 995]
        agent = tok._client.agent
        assert agent is not None and agent.process.poll() is None
    assert agent.process.poll() is not None
    assert isinstance(np.asarray(tok.offsets("Hello world", [15496, 995])), np.ndarray)
