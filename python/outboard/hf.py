"""Hugging Face's tokenizer surface over Outboard's exact tokenizers, on the host, the agent or chosen
per batch: an inference engine written against a ``transformers`` tokenizer adopts the offload by
swapping one object.

    tok = outboard.hf.HFTokenizer("mistral-v3", placement="agent")   # starts a local agent
    enc = tok(["Hello world", "Hi"], return_offsets_mapping=True)      # input_ids, attention_mask, offsets
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}]) # mistral-common's ids
    stream = tok.stream_decoder()                                      # detokenization, on the agent too

What follows each reference, and where they differ:

- ``encode``/``__call__`` give the family's reference ids (tiktoken, mistral-common, sentencepiece,
  HF's BERT); ``add_special_tokens`` adds what ``transformers`` adds (BOS for Mistral's families,
  [CLS]/[SEP] for BERT, nothing for tiktoken's). Special-token text in the input is found as HF does
  for tiktoken's families and BERT, and is ordinary text for Mistral's, as in mistral-common (a
  user's text cannot forge ``[INST]``).
- ``offset_mapping`` is HF's: code point spans, a token holding part of a character spanning all of
  it, added tokens (0, 0)-wide where they stand; WordPiece's point into the text as given, through
  its normalizer (case, accents, controls).
- ``apply_chat_template`` gives the ids of mistral-common's ``encode_chat_completion`` for the
  instruct versions v1 (``[INST]`` as text), v2/v3 (as control ids; the files this package fetches)
  and v7 (each system message a ``[SYSTEM_PROMPT]`` block where it stands; a ``.model.v7`` file
  given by path), with tools from v2: the function definitions, the assistant's calls and the tool
  messages' results, checked as mistral-common's serving mode checks them. Content is text or
  OpenAI's list of text parts (joined as mistral-common joins them); other parts (images) are
  refused, naming the message, and so are tools for v1, which mistral-common drops unseen.
- ``decode`` without special tokens is mistral-common's text (its IGNORE policy); with them, each
  special's text stands between text decoded as the family's reference decodes it: Tekken's equals
  mistral-common's KEEP; for SentencePiece there is no one reference to follow (mistral-common's
  KEEP shows raw pieces, ``▁`` and ``<0x0A>``; transformers 4.57's slow and fast Llama tokenizers
  built from the same file insert spaces after ``<s>`` and differ from each other).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal, Union

import numpy as np

from . import vocab
from .client import Client, connect
from .detokenize import Detokenizer, finish_flags
from .errors import Error, InvalidArgument, NotFound
from .offload import AutoPolicy, OffloadTokenizer, Placement, open_local
from .tokenizer import DecodeStream

Conversation = Sequence[Mapping[str, Any]]
Padding = Union[bool, Literal["longest", "max_length", "do_not_pad"]]

#: Special tokens per family, as the Hugging Face tokenizers of those models name them.
_SPECIALS = {
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "tekken": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
    "tiktoken": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
    "bert": {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
             "mask_token": "[MASK]"},
}
_ATTRIBUTES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
#: mistral-common's instruct versions this adapter renders (v2 and v3 differ only in tools; v7 gives
#: each system message its own [SYSTEM_PROMPT] block where it stands).
CHAT_VERSIONS = ("v1", "v2", "v3", "v7")


class BatchEncoding(dict):
    """What ``__call__`` returns: a dict (``input_ids``, ``attention_mask``, ``offset_mapping``, ...)
    whose keys are also attributes, as transformers' BatchEncoding."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


class HFTokenizer:
    """``name``: as for ``Client.tokenizer`` ("cl100k_base", "mistral-v3", "tekken", a vocabulary path).
    ``placement``: where encoding runs ("host", "agent", "auto"); with "agent" or "auto" and no
    ``client``, a local agent is started and stopped by ``close()``. Metadata (token spellings,
    offsets, special tokens) and whole-sequence ``decode`` always run here: they cost a table read.
    Thread mode: multi for encoding (batches from several threads are in flight at once)."""

    def __init__(self, name: str | Path, *, placement: Placement = "host", client: Client | None = None,
                 policy: AutoPolicy | None = None, timeout: float = 10.0) -> None:
        self.name = str(name)
        self.placement = placement
        self._client = client
        self._own_client = False
        if placement != "host" and client is None:
            self._client, self._own_client = connect(), True
        connection = self._client.connection if self._client is not None and placement != "host" else None
        try:
            self._offload = OffloadTokenizer(connection, name, placement=placement, policy=policy, timeout=timeout)
        except BaseException:
            if self._own_client:
                self._client.close()  # type: ignore[union-attr]
            raise
        self._timeout = timeout
        self._local = self._offload.local or open_local(name)
        self._core = self._local._core
        self._specials = dict(self._core.special_tokens())  # text -> id
        self._special_ids = np.fromiter(self._specials.values(), np.int32, len(self._specials))
        self.family = _family(self.name, self._core)
        self.chat_version = _chat_version(self.name, self.family)
        self._vocab: dict[str, int] | None = None
        self._vocab_lock = threading.Lock()
        for attribute in _ATTRIBUTES:
            setattr(self, attribute, None)
        for attribute, token in _SPECIALS[self.family].items():
            if self._token_id(token) is not None:
                setattr(self, attribute, token)

    # --- the vocabulary ---------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._core.vocab_size

    def __len__(self) -> int:
        return self._core.vocab_size

    def get_vocab(self) -> dict[str, int]:
        """Spelling -> id for every id (built once, on first use)."""
        with self._vocab_lock:
            if self._vocab is None:
                self._vocab = {t: i for i, t in enumerate(self._core.tokens()) if t is not None}
            return self._vocab

    def _token_id(self, token: str) -> int | None:
        special = self._specials.get(token)
        return special if special is not None else self.get_vocab().get(token)

    def convert_ids_to_tokens(self, ids: int | Iterable[int],
                              skip_special_tokens: bool = False) -> str | None | list[str | None]:
        """Spellings; None for an id the vocabulary does not hold (as transformers' fast tokenizers)."""
        if isinstance(ids, (int, np.integer)):
            try:
                return self._core.token_text(int(ids))
            except NotFound:
                return None
        special = set(self.all_special_ids) if skip_special_tokens else set()
        return [self.convert_ids_to_tokens(int(i)) for i in ids if int(i) not in special]  # type: ignore[misc]

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | None | list[int | None]:
        """An unknown spelling gives ``unk_token_id`` (None where the vocabulary has no unknown token)."""
        if isinstance(tokens, str):
            found = self._token_id(tokens)
            return self.unk_token_id if found is None else found
        return [self.convert_tokens_to_ids(t) for t in tokens]  # type: ignore[misc]

    def __getattr__(self, name: str) -> Any:
        # bos_token_id, eos_token_id, ...: the id of the attribute's token (None if it has none).
        if name.endswith("_token_id") and name[:-3] in _ATTRIBUTES:
            token = getattr(self, name[:-3])
            return None if token is None else self._token_id(token)
        raise AttributeError(f"{type(self).__name__} has no attribute '{name}'")

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return {a: getattr(self, a) for a in _ATTRIBUTES if getattr(self, a) is not None}

    @property
    def additional_special_tokens(self) -> list[str]:
        """The vocabulary's other special and control tokens ([INST], tools, fillers), by id."""
        named = set(self.special_tokens_map.values())
        return [t for t in self._specials if t not in named]

    @property
    def all_special_tokens(self) -> list[str]:
        return list(dict.fromkeys([*self.special_tokens_map.values(), *self.additional_special_tokens]))

    @property
    def all_special_ids(self) -> list[int]:
        return [self._token_id(t) for t in self.all_special_tokens]  # type: ignore[misc]

    # --- encoding ---------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True, *, truncation: bool = False,
               max_length: int | None = None) -> list[int]:
        return self(text, add_special_tokens=add_special_tokens, truncation=truncation,
                    max_length=max_length, return_attention_mask=False)["input_ids"]

    def __call__(self, text: str | Sequence[str], text_pair: Any = None, *, add_special_tokens: bool = True,
                 padding: Padding = False, truncation: bool = False, max_length: int | None = None,
                 return_tensors: Literal["np", "pt"] | None = None, return_attention_mask: bool = True,
                 return_offsets_mapping: bool = False, return_length: bool = False) -> BatchEncoding:
        """One text or a batch (one round trip to the agent for all of them). ``truncation`` keeps the
        first ``max_length`` ids; ``padding`` ("longest" or True, "max_length") pads on the right with
        ``pad_token_id``. A text that fails raises its error."""
        if text_pair is not None:
            raise InvalidArgument("text pairs are not supported: encode each text")
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        if truncation and max_length is None:
            raise InvalidArgument("truncation needs max_length")
        batch = self._offload.encode_batch(texts, add_special_tokens=add_special_tokens,
                                           allowed_special=self._allowed_special)
        rows = [np.array(batch[i]) for i in range(len(texts))]  # copies: the agent's buffer is reused
        offsets = [self.offsets(t, r) for t, r in zip(texts, rows)] if return_offsets_mapping else None
        if truncation:
            rows = [r[:max_length] for r in rows]
            offsets = None if offsets is None else [o[:max_length] for o in offsets]
        out = BatchEncoding(input_ids=rows)
        if return_attention_mask:
            out["attention_mask"] = [np.ones(len(r), np.int32) for r in rows]
        if offsets is not None:
            out["offset_mapping"] = offsets
        if return_length:
            out["length"] = [len(r) for r in rows]
        if padding not in (False, "do_not_pad"):
            self._pad(out, padding, max_length)
        return _finish(out, single, return_tensors)

    def batch_encode_plus(self, texts: Sequence[str], **options: Any) -> BatchEncoding:
        return self(list(texts), **options)

    def offsets(self, text: str, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """HF's offset_mapping of ``ids``, an encoding of ``text``: an (n, 2) array of code point spans."""
        return self._core.char_offsets(text, np.ascontiguousarray(ids, dtype=np.int32)).reshape(-1, 2)

    @property
    def _allowed_special(self) -> Literal["all"] | tuple[()]:
        # HF finds added tokens in the text; Mistral's references keep them ordinary text.
        return "all" if self.family in ("tiktoken", "bert") else ()

    def _pad(self, out: BatchEncoding, padding: Padding, max_length: int | None) -> None:
        if self.pad_token_id is None:
            raise InvalidArgument(f"{self.name} has no padding token: pass padding=False")
        if padding == "max_length" and max_length is None:
            raise InvalidArgument("padding='max_length' needs max_length")
        width = max_length if padding == "max_length" else max(map(len, out["input_ids"]), default=0)
        fill = {"input_ids": self.pad_token_id, "attention_mask": 0}
        for key, rows in list(out.items()):
            if key in fill:
                out[key] = [np.pad(r, (0, max(0, width - len(r))), constant_values=fill[key]) for r in rows]
            elif key == "offset_mapping":
                out[key] = [np.pad(r, ((0, max(0, width - len(r))), (0, 0))) for r in rows]

    # --- decoding ---------------------------------------------------------------------------

    def decode(self, ids: int | Sequence[int] | np.ndarray, skip_special_tokens: bool = False) -> str:
        """Special tokens by their text (none with ``skip_special_tokens``); the ids between them as the
        family's reference decodes them."""
        ids = np.atleast_1d(np.asarray(ids, dtype=np.int32))
        # all_special_ids without rebuilding Tekken's 1000 per call: the vocabulary's specials, fixed,
        # and the named attributes' ids (an unknown token that is no special, say), which a user may set.
        named = [self._token_id(t) for t in self.special_tokens_map.values()]
        special = np.isin(ids, self._special_ids) | np.isin(ids, [i for i in named if i is not None])
        if skip_special_tokens or not special.any():
            return self._local.decode(ids[~special] if skip_special_tokens else ids)
        parts, start = [], 0
        for k in np.flatnonzero(special).tolist():
            parts += [self._local.decode(ids[start:k]), self._core.token_text(int(ids[k]))]
            start = k + 1
        return "".join(parts) + self._local.decode(ids[start:])

    def batch_decode(self, sequences: Iterable[Sequence[int] | np.ndarray], skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(s, skip_special_tokens=skip_special_tokens) for s in sequences]

    def stream_decoder(self, placement: Literal["host", "agent"] | None = None) -> StreamDecoder:
        """Streaming detokenization, by default where encoding runs: on the agent for "agent" and
        "auto" (each sequence's state kept there, one round trip per generation step), here for
        "host". A step of one id per sequence is little work; its round trip can cost the server more
        CPU than decoding here (``outboard bench serving`` measures both)."""
        placement = placement or ("host" if self.placement == "host" else "agent")
        if placement == "host":
            return StreamDecoder(self._local, None)
        if self._client is None:
            raise InvalidArgument("stream_decoder('agent') needs a tokenizer placed on an agent")
        return StreamDecoder(self._local, self._client.detokenizer(self.name, timeout=self._timeout))

    # --- chat -------------------------------------------------------------------------------

    def apply_chat_template(self, conversation: Conversation | Sequence[Conversation],
                            tools: Sequence[Mapping[str, Any]] | None = None, *, tokenize: bool = True,
                            add_generation_prompt: bool = False, continue_final_message: bool = False,
                            return_dict: bool = False) -> Any:
        """The prompt of a conversation in mistral-common's format for this tokenizer's version, or of
        each of a batch of conversations (a list of them: a list of prompts back), all of whose texts
        go in one batch. Messages as OpenAI's and transformers' (``role``: system, user, assistant or
        tool; ``content`` text or a list of text parts; an assistant's ``tool_calls``, a tool
        message's ``tool_call_id`` and ``name``); ``tools``: OpenAI's function definitions, from v2,
        for every conversation (checking their schemas needs jsonschema, the ``chat`` extra).
        ``continue_final_message``: the last message is an assistant's to continue (no EOS after it);
        ``add_generation_prompt`` changes nothing (Mistral's prompts end where the answer starts).
        ``tokenize=False``: the prompt as text, control tokens by name (for reading, not re-encoding:
        each part is encoded alone)."""
        del add_generation_prompt
        single, prompts = self._render(conversation, tools, continue_final_message)
        if not tokenize:
            texts = ["".join(p if isinstance(p, str) else p[0] for p in parts) for parts in prompts]
            return texts[0] if single else texts
        texts = _texts_of(prompts)
        return self._prompt_ids(single, prompts, self._offload.encode_batch(texts) if texts else None, return_dict)

    def submit_chat_template(self, conversation: Conversation | Sequence[Conversation],
                             tools: Sequence[Mapping[str, Any]] | None = None, *,
                             continue_final_message: bool = False, return_dict: bool = False) -> Future[Any]:
        """apply_chat_template()'s ids without waiting for them, as ``OffloadTokenizer.submit``: a
        server's engine loop submits the prompts it admits, runs its model step, then takes them. A
        conversation that breaks the format raises here; a failed encoding, at the future's result."""
        single, prompts = self._render(conversation, tools, continue_final_message)
        texts = _texts_of(prompts)
        ids: Future[Any] = Future()
        ids.set_running_or_notify_cancel()

        def assemble(batch: Future[Any] | None) -> None:
            try:
                ids.set_result(self._prompt_ids(single, prompts, None if batch is None else batch.result(),
                                                return_dict))
            except Exception as e:  # the batch's error: the future's, not the collector thread's
                ids.set_exception(e)

        if texts:
            self._offload.submit(texts).add_done_callback(assemble)
        else:
            assemble(None)
        return ids

    async def apply_chat_template_async(self, conversation: Conversation | Sequence[Conversation],
                                        tools: Sequence[Mapping[str, Any]] | None = None, *,
                                        continue_final_message: bool = False, return_dict: bool = False) -> Any:
        """apply_chat_template()'s ids for asyncio (an OpenAI-compatible frontend), as
        ``OffloadTokenizer.encode_batch_async``: the loop never waits for the agent's answer."""
        single, prompts = self._render(conversation, tools, continue_final_message)
        texts = _texts_of(prompts)
        batch = await self._offload.encode_batch_async(texts) if texts else None
        return self._prompt_ids(single, prompts, batch, return_dict)

    def _render(self, conversation: Conversation | Sequence[Conversation], tools: Sequence[Mapping[str, Any]] | None,
                continue_final_message: bool) -> tuple[bool, list[list[str | tuple[str]]]]:
        """Whether ``conversation`` is one (not a batch), and each one's prompt parts."""
        single = not (_is_list(conversation) and conversation and _is_list(conversation[0]))
        version = self.chat_version or _no_chat(self.name)
        return single, [render_chat(c, version, tools=tools, continue_final_message=continue_final_message)
                        for c in ([conversation] if single else conversation)]

    def _prompt_ids(self, single: bool, prompts: list[list[str | tuple[str]]], batch: Any, return_dict: bool) -> Any:
        """The prompts' ids from ``batch``, the encoding of their texts in order (None: they have none)."""
        encoded = iter(batch if batch is not None else ())
        ids = [np.concatenate([next(encoded) if isinstance(p, str) else self._control_id(p[0]) for p in parts]).tolist()
               for parts in prompts]
        if return_dict:
            out = BatchEncoding(input_ids=ids, attention_mask=[[1] * len(i) for i in ids])
            return BatchEncoding({k: v[0] for k, v in out.items()}) if single else out
        return ids[0] if single else ids

    def _control_id(self, token: str) -> np.ndarray:
        return np.array([self._core.special_id(token)], np.int32)

    def close(self) -> None:
        self._offload.close()
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> HFTokenizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StreamDecoder:
    """Streaming detokenization of many sequences at once (a server's generation step): ``open()`` a
    sequence, ``step([(seq, new_ids), ...])`` gives each the text its ids complete, ``finish=True``
    also what it held back, and closes it. The text is the family's decode (``Tokenizer.decode``:
    control ids invisible for Mistral's families). On the agent, one round trip per step; a failed
    step is its error, in its place. ``submit(steps)`` and ``result(ticket)`` are ``step`` without
    waiting: an engine submits a generation step's ids, runs its next step while the agent decodes
    them, and takes their text after it (on the host it is decoded at once)."""

    def __init__(self, local: Any, remote: Detokenizer | None) -> None:
        self._local, self._remote = local, remote
        self._streams: dict[int, DecodeStream] = {}
        self._next = 0
        self._decoded: dict[int, list[str | Error]] = {}  # the host's submitted steps, by ticket
        self._tickets = 0
        self.placement = "host" if remote is None else "agent"

    def open(self) -> int:
        if self._remote is not None:
            return self._remote.stream()
        self._next += 1
        self._streams[self._next] = self._local.decode_stream()
        return self._next

    def step(self, steps: Sequence[tuple[int, Sequence[int] | np.ndarray]], *,
             finish: Sequence[bool] | bool = False) -> list[str | Error]:
        if self._remote is not None:
            return self._remote.step(steps, finish=finish)
        flags = finish_flags(steps, finish)
        out: list[str | Error] = []
        for (handle, ids), done in zip(steps, flags):
            stream = self._streams.get(handle)
            if stream is None:
                out.append(InvalidArgument(f"stream {handle} is not open"))
                continue
            try:
                text = stream.step(ids)
            except Error as e:
                out.append(e)
                continue
            if done:
                text += stream.finish()
                del self._streams[handle]
            out.append(text)
        return out

    def submit(self, steps: Sequence[tuple[int, Sequence[int] | np.ndarray]], *,
               finish: Sequence[bool] | bool = False) -> int:
        """``step`` without waiting for its texts: a ticket for ``result``."""
        if self._remote is not None:
            return self._remote.submit(steps, finish=finish)
        self._tickets += 1
        self._decoded[self._tickets] = self.step(steps, finish=finish)
        return self._tickets

    def result(self, ticket: int, *, wait: bool = True) -> list[str | Error] | None:
        """A submitted step's texts; without ``wait``, None while they have not come."""
        if self._remote is not None:
            return self._remote.result(ticket, wait=wait)
        if ticket not in self._decoded:
            raise InvalidArgument(f"step {ticket} was not submitted, or its result was taken")
        return self._decoded.pop(ticket)

    def close(self, handle: int) -> None:
        if self._remote is not None:
            self._remote.close(handle)
        else:
            self._streams.pop(handle, None)


def render_chat(conversation: Conversation, version: str, *, tools: Sequence[Mapping[str, Any]] | None = None,
                continue_final_message: bool = False) -> list[str | tuple[str]]:
    """mistral-common's prompt for ``version`` as parts: texts to encode (each alone) and control
    tokens (a 1-tuple of the token's name), BOS first. Its normalizer's rules: up to v3 system
    messages join into one prompt (put before the first user message's text in v1, the last one's in
    v2/v3) and a conversation not opening with a user message gets an empty one; from v7 each system
    message is a block of its own where it stands. Runs of user or assistant messages join with blank
    lines (an assistant's tool calls too); each tool message stands alone. ``tools`` (OpenAI's
    function definitions) go before the last user message, from v2."""
    if version not in CHAT_VERSIONS:
        raise InvalidArgument(f"chat format {version} is not supported (only {', '.join(CHAT_VERSIONS)})")
    blocks = version == "v7"  # system messages as blocks, not one prompt
    messages = _checked(conversation, version, continue_final_message)
    definitions = _tools(tools, version)  # their JSON text, "" without tools
    system = None if blocks else "\n\n".join(
        m.content for m in messages if m.role == "system" and m.given) or None
    turns: list[_Message] = []  # a system message ends a run as in mistral-common
    previous = None
    for m in messages:
        if m.role == "tool":
            turns.append(m)
        elif m.role == "system":
            if blocks:
                turns.append(m)
        elif m.role == previous:
            turn = turns[-1]
            turn.content = "\n\n".join(c for c in (turn.content, m.content) if c)
            turn.calls += m.calls
        else:
            turns.append(dataclasses.replace(m, calls=list(m.calls)))
        previous = m.role
    if continue_final_message:
        turns[-1].prefix = True
    if not blocks and (not turns or turns[0].role != "user"):
        turns.insert(0, _Message("user", ""))  # the normalizer's
    users = [i for i, t in enumerate(turns) if t.role == "user"]
    last_user = users[-1] if users else -1
    if version == "v2":
        _one_result_per_call(turns[max(last_user, 0):])
    parts: list[str | tuple[str]] = [("<s>",)]
    for i, t in enumerate(turns):
        if t.role == "system":
            parts += [("[SYSTEM_PROMPT]",), t.content, ("[/SYSTEM_PROMPT]",)]
        elif t.role == "user":
            with_system = system is not None and i == (users[0] if version == "v1" else last_user)
            text = f"{system}\n\n{t.content}" if with_system else t.content
            if version == "v1":
                parts.append(f"[INST] {text} [/INST]")
                continue
            if i == last_user and definitions:
                parts += [("[AVAILABLE_TOOLS]",), definitions, ("[/AVAILABLE_TOOLS]",)]
            parts += [("[INST]",), text, ("[/INST]",)]
        elif t.role == "tool":
            parts += _tool_result(t, version, before_last_user=i < last_user)
        else:
            parts += _answer(t, version, before_last_user=i < last_user)
    return [p for p in parts if p != ""]


#: mistral-common's rules for a function's name (in tools, calls and tool messages) and, from v3, a
#: call's id; as its validator matches them (re.match with $: a trailing newline passes).
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_CALL_ID = re.compile(r"^[a-zA-Z0-9]{9}$")
#: The roles each role may follow (mistral-common's validator).
_FOLLOWS = {"system": {"user", "assistant", "system"}, "user": {"assistant", "system", "user"},
            "assistant": {"assistant", "user", "tool"}, "tool": {"assistant", "tool", "user"}}


@dataclasses.dataclass
class _Message:
    """A message as checked (``index``: its place in the conversation, of a run its first's): an
    assistant's missing content is "", its calls are (id, function name, arguments as mistral-common
    reads them); a tool message's ``call_id`` and function ``name``."""
    role: str
    content: str
    index: int = -1
    calls: list[tuple[str, str, Any]] = dataclasses.field(default_factory=list)
    call_id: str | None = None
    name: str | None = None
    prefix: bool = False
    given: bool = False  # content was given, as mistral-common's validator reads it: a list of empty parts is


def _texts_of(prompts: list[list[str | tuple[str]]]) -> list[str]:
    """The prompts' texts to encode, in order (control tokens left out)."""
    return [p for parts in prompts for p in parts if isinstance(p, str)]


def _is_list(x: Any) -> bool:
    """A list of items, as JSON has them: a sequence, but not text, bytes or a mapping."""
    return isinstance(x, Sequence) and not isinstance(x, (str, bytes, Mapping))


def _checked(conversation: Conversation, version: str, continue_final_message: bool) -> list[_Message]:
    """The messages, checked as mistral-common's validator for ``version`` checks them in serving
    mode (the mode of a server): roles in a valid order, each call answered by one tool message."""
    if not _is_list(conversation):
        raise InvalidArgument(f"a conversation is a list of messages, not {type(conversation).__name__}")
    messages = [_message(i, m, version) for i, m in enumerate(conversation)]
    if not messages:
        raise InvalidArgument("the conversation has no messages")
    if len(messages) == 1 and messages[0].role not in ("user", "system"):
        raise InvalidArgument(f"a conversation of one message must be a user's or a system's, not {messages[0].role}")
    if continue_final_message and messages[-1].role != "assistant":
        raise InvalidArgument("continue_final_message needs an assistant message last")
    if len(messages) > 1 and messages[-1].role == "assistant" and not continue_final_message:
        raise InvalidArgument("the last message is an assistant's: pass continue_final_message=True to continue it")
    unanswered = 0  # the validator starts counting at the second message
    for i, (before, m) in enumerate(zip(messages, messages[1:]), 1):
        if m.role not in _FOLLOWS[before.role]:
            raise InvalidArgument(f"message {i}: role '{m.role}' cannot follow '{before.role}'")
        if m.role == "tool":
            unanswered -= 1
        elif m.role == "assistant":
            if unanswered:
                raise InvalidArgument(f"message {i}: {_unanswered(unanswered)} before it")
            unanswered = len(m.calls)
    if unanswered:
        raise InvalidArgument(f"the conversation ends with {_unanswered(unanswered)}")
    return messages


def _unanswered(n: int) -> str:
    return f"unanswered tool calls ({n})" if n > 0 else f"tool messages answering no call ({-n})"


def _message(i: int, m: Mapping[str, Any], version: str) -> _Message:
    """One message, checked alone."""
    role = m.get("role") if isinstance(m, Mapping) else None
    if not isinstance(role, str) or role not in _FOLLOWS:
        raise InvalidArgument(f"message {i}: role {role!r} is not supported (system, user, assistant, tool)")
    given = m.get("content")
    if given is None and role == "assistant":
        given = ""
    content = _text(i, given)
    if m.get("tool_calls") and role != "assistant":
        raise InvalidArgument(f"message {i}: only an assistant's message has tool_calls, not a {role}'s")
    if version == "v1" and (role == "tool" or m.get("tool_calls")):
        raise InvalidArgument(f"message {i}: mistral-common's v1 format has no tools")
    listed = m.get("tool_calls") or ()
    if not _is_list(listed):
        raise InvalidArgument(f"message {i}: tool_calls must be a list, not {type(listed).__name__}")
    calls = [_call(f"message {i}, tool call {j}", c, version) for j, c in enumerate(listed)]
    out = _Message(role, content, i, calls, given=bool(given))
    if role == "assistant" and version != "v7" and bool(given) == bool(calls):
        raise InvalidArgument(f"message {i}: an assistant message needs content or tool calls, and "
                              "up to v3 not both" if calls else f"message {i}: an assistant message without content")
    if role == "tool":
        out.name, out.call_id = m.get("name"), m.get("tool_call_id")
        if out.name is not None and not (isinstance(out.name, str) and _FUNCTION_NAME.match(out.name)):
            raise InvalidArgument(f"message {i}: function name {out.name!r} is not 1-64 of a-z, A-Z, 0-9, _ and -")
        if version != "v2" and not (isinstance(out.call_id, str) and _CALL_ID.match(out.call_id)):
            raise InvalidArgument(f"message {i}: tool_call_id {out.call_id!r} is not 9 of a-z, A-Z and 0-9 "
                                  f"(as {version} needs)")
    return out


def _text(i: int, content: Any) -> str:
    """A message's content: text, or OpenAI's list of text parts, joined as mistral-common joins
    them (with blank lines, empty ones left out)."""
    if isinstance(content, str):
        return content
    if not _is_list(content):
        raise InvalidArgument(f"message {i}: content must be text or a list of text parts, "
                              f"not {type(content).__name__}")
    texts = []
    for j, part in enumerate(content):
        if not (isinstance(part, Mapping) and part.keys() == {"type", "text"} and part["type"] == "text"
                and isinstance(part["text"], str)):
            raise InvalidArgument(f"message {i}: content part {j} is not {{'type': 'text', 'text': ...}} "
                                  "(images and other parts are not supported)")
        texts.append(part["text"])
    return "\n\n".join(t for t in texts if t)


def _call(where: str, call: Any, version: str) -> tuple[str, str, Any]:
    """A tool call (OpenAI's ``{"id", "type": "function", "function": {"name", "arguments"}}``)."""
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or call.get("type", "function") != "function":
        raise InvalidArgument(f"{where}: not a {{'type': 'function', 'function': {{'name', 'arguments'}}}} object")
    name, arguments, call_id = function.get("name"), function.get("arguments"), call.get("id", "null")
    if not (isinstance(name, str) and _FUNCTION_NAME.match(name)):
        raise InvalidArgument(f"{where}: function name {name!r} is not 1-64 of a-z, A-Z, 0-9, _ and -")
    if isinstance(arguments, Mapping):
        try:
            arguments = json.dumps(dict(arguments))
        except (TypeError, ValueError, RecursionError) as e:
            raise InvalidArgument(f"{where}: arguments are not JSON: {e}") from None
    elif arguments is not None and not isinstance(arguments, str):
        raise InvalidArgument(f"{where}: arguments must be a JSON text or an object, not {type(arguments).__name__}")
    if not isinstance(call_id, str) or (version != "v2" and not _CALL_ID.match(call_id)):
        raise InvalidArgument(f"{where}: id {call_id!r} is not 9 of a-z, A-Z and 0-9 (as {version} needs)")
    return call_id, name, _json_value(arguments)


def _tools(tools: Sequence[Mapping[str, Any]] | None, version: str) -> str:
    """The function definitions as mistral-common writes them (name, description, parameters), as
    JSON text ("" for none), each checked: a valid name, and parameters that are a JSON schema (draft
    7, checked by jsonschema as mistral-common does). Tools of JSON's own types are checked once per
    text (a server sends the same ones with every request: ~110 us of jsonschema each here)."""
    if tools is not None and not _is_list(tools):
        raise InvalidArgument(f"tools must be a list of function definitions, not {type(tools).__name__}")
    if not tools:
        return ""
    if version == "v1":  # mistral-common drops them unseen: the model would not know its tools
        raise InvalidArgument("mistral-common's v1 format has no tools")
    text = _plain_json(tools)
    return _checked_tools(text) if text is not None else _check_tools(tools)


#: Tool lists whose check _checked_tools() keeps, by their JSON text.
CHECKED_TOOLS_CACHE = 64
#: Deepest nesting of tools kept by their text; deeper ones are checked as given, every time.
PLAIN_TOOLS_DEPTH = 64


@functools.lru_cache(maxsize=CHECKED_TOOLS_CACHE)
def _checked_tools(text: str) -> str:
    return _check_tools(json.loads(text))  # a refusal is not kept: it is raised again each time


def _plain_json(value: Any) -> str | None:
    """``value`` as JSON text where it holds JSON's own types only (dict with str keys, list, str,
    int, float, bool, None; a tuple, which jsonschema reads otherwise than a list, is not) within
    PLAIN_TOOLS_DEPTH levels, else None."""
    def plain(v: Any, depth: int) -> bool:
        t = type(v)
        if t is dict:
            return depth < PLAIN_TOOLS_DEPTH and all(type(k) is str and plain(x, depth + 1) for k, x in v.items())
        if t is list:
            return depth < PLAIN_TOOLS_DEPTH and all(plain(x, depth + 1) for x in v)
        return t in (str, int, float, bool) or v is None
    return _json(value) if plain(value, 0) else None


def _check_tools(tools: Sequence[Any]) -> str:
    """_tools()'s checks and text, on the tools as given."""
    try:
        import jsonschema
    except ImportError:
        raise InvalidArgument("checking tools' parameter schemas needs jsonschema: "
                              "pip install 'outboard[chat]'") from None
    out = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or tool.get("type", "function") != "function":
            raise InvalidArgument(f"tool {i}: not a {{'type': 'function', 'function': {{...}}}} object")
        name, parameters = function.get("name"), function.get("parameters")
        description = function.get("description", "")
        if not (isinstance(name, str) and _FUNCTION_NAME.match(name)):
            raise InvalidArgument(f"tool {i}: function name {name!r} is not 1-64 of a-z, A-Z, 0-9, _ and -")
        if not isinstance(description, str) or not isinstance(parameters, Mapping):
            raise InvalidArgument(f"tool {i} ({name}): needs a text description and parameters as an object")
        try:
            _json(parameters)
        except (TypeError, ValueError, RecursionError) as e:
            raise InvalidArgument(f"tool {i} ({name}): parameters are not JSON: {e}") from None
        try:
            jsonschema.Draft7Validator.check_schema(parameters)
        except jsonschema.exceptions.SchemaError as e:
            raise InvalidArgument(f"tool {i} ({name}): parameters are not a JSON schema (draft 7): "
                                  f"{e.message}") from None
        out.append({"type": "function",
                    "function": {"name": name, "description": description, "parameters": parameters}})
    return _json(out)


def _one_result_per_call(turns: Sequence[_Message]) -> None:
    """v2 renders one tool result per assistant turn (from the last user message on)."""
    calls_turn, results = False, 0
    for t in turns:
        if t.role == "assistant":
            calls_turn, results = bool(t.calls), 0
        elif t.role == "tool":
            results += calls_turn
            if results > 1:
                raise InvalidArgument(f"message {t.index}: v2 renders one tool result per assistant turn, "
                                      "and this is the second")
        else:
            calls_turn, results = False, 0


def _answer(t: _Message, version: str, before_last_user: bool) -> list[str | tuple[str]]:
    """An assistant's run: its text, then its calls as a JSON list (ids from v3), then EOS unless
    it is continued. v2 drops calls made before the last user message."""
    if not t.content and not t.calls:
        raise InvalidArgument(f"message {t.index}: an assistant message without content")
    if t.content and t.calls and version != "v7":
        raise InvalidArgument(f"message {t.index}: an assistant's content and tool calls together (v7 renders "
                              f"them, {version} does not)")
    if t.calls and before_last_user and version == "v2":
        return []
    parts: list[str | tuple[str]] = [t.content if version == "v1" else t.content.rstrip(" ")]
    if t.calls:
        calls = [{"name": name, "arguments": arguments} | ({"id": call_id} if version != "v2" else {})
                 for call_id, name, arguments in t.calls]
        parts += [("[TOOL_CALLS]",), _json(calls)]
    return parts if t.prefix else [*parts, ("</s>",)]


def _tool_result(t: _Message, version: str, before_last_user: bool) -> list[str | tuple[str]]:
    """A tool message: up to v3 a JSON object of its content (read as JSON where it is), from v7 its
    call's id and its text. v2 drops results before the last user message."""
    if version == "v7":
        return [("[TOOL_RESULTS]",), t.call_id or "", ("[TOOL_CONTENT]",), t.content, ("[/TOOL_RESULTS]",)]
    if version == "v2" and before_last_user:
        return []
    content = _json_value(t.content)
    result = [{"name": t.name, "content": content}] if version == "v2" else {"content": content, "call_id": t.call_id}
    return [("[TOOL_RESULTS]",), _json(result), ("[/TOOL_RESULTS]",)]


def _json_value(text: str | None) -> Any:
    """A JSON text as mistral-common reads arguments and tool results: its value, the text itself
    where it is not JSON, {} where it is empty."""
    if not text:
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except RecursionError:  # mistral-common's own reading fails too
        raise InvalidArgument(f"a JSON text of {len(text)} characters nests deeper than Python reads") from None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _family(name: str, core: Any) -> str:
    if core.special_id("[CLS]") >= 0:
        return "bert"
    if name == "tekken" or Path(name).name.startswith("tekken"):
        return "tekken"
    if name.startswith("mistral-") or ".model" in Path(name).name:
        return "mistral"
    return "tiktoken"


def _chat_version(name: str, family: str) -> str | None:
    """mistral-common's instruct version for a vocabulary: the ``.model.vN`` suffix, or Tekken's
    ``config.version``."""
    if family == "tekken":
        path = vocab.path("tekken") if name == "tekken" else Path(name)
        with open(path, encoding="utf-8") as f:
            head = f.read(4096)  # the config object comes first
        found = re.search(r'"version"\s*:\s*"(v\d+)"', head)
        return found.group(1) if found else None
    if family == "mistral":
        file = vocab.path(name).name if name.startswith("mistral-") else Path(name).name
        found = re.search(r"\.model\.(v\d+)$", file)
        return found.group(1) if found else None
    return None


def _no_chat(name: str) -> str:
    raise InvalidArgument(f"{name} has no chat format: Mistral's vocabularies (mistral-v1, mistral-v3, tekken) do")


def _finish(out: BatchEncoding, single: bool, tensors: str | None) -> BatchEncoding:
    if tensors is None:
        for key, rows in out.items():
            out[key] = [r.tolist() if isinstance(r, np.ndarray) else r for r in rows]
            out[key] = out[key][0] if single else out[key]
        return out
    if tensors not in ("np", "pt"):
        raise InvalidArgument(f"return_tensors '{tensors}' is not 'np' or 'pt'")
    for key, rows in out.items():
        if len({len(r) if hasattr(r, "__len__") else 0 for r in rows}) > 1:
            raise InvalidArgument(f"'{key}' rows differ in length: pass padding=True to make a tensor")
        array = np.stack(rows) if rows and hasattr(rows[0], "__len__") else np.asarray(rows)
        if tensors == "pt":
            import torch

            array = torch.from_numpy(np.ascontiguousarray(array).astype(np.int64))
        out[key] = array
    return out

