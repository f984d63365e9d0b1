"""Tokenization offload: exact ids from the agent, written straight into this process's memory.

    client = outboard.connect()                  # None: a local agent
    tok = client.tokenizer("gpt2")               # placement="agent" | "host" | "auto"
    batch = tok.encode_batch(texts, max_len=2048)
    batch.ids, batch.offsets                     # np.int32 view of the registered buffer, np.uint64
    future = tok.submit(texts)                   # overlap: concurrent.futures.Future[Batch]
    batch = await tok.encode_batch_async(texts)  # asyncio: agent batches finish on the loop itself
    queue = tok.queue()                          # a serving loop's own: put() now, poll() each step

``host`` tokenizes in this process, ``agent`` on the agent, and ``auto`` routes each batch by
what it measures (see :class:`AutoPolicy`). Every placement gives the same ids and the same
per-text errors (one native function applies the per-text rules on both sides); a text that fails
(invalid UTF-8, over ``max_len``, a disallowed special token, too long, no room in the output
buffer) fails alone.

The modules, each on those before it: ``batch`` (Batch, Options), ``policy`` (AutoPolicy),
``inflight`` (agent batches in flight over a connection's native completions: the one mechanism
under every way of waiting), ``aio`` (asyncio's view), ``queue`` (BatchQueue's), ``tokenizer``
(OffloadTokenizer: the one route of a batch, the blocking and submit() views).
"""

from __future__ import annotations

from .batch import MAX_TEXT_BYTES, Batch, Options, Text
from .inflight import CpuSplit, measure_cpu
from .policy import AutoPolicy
from .queue import POLL_ROUNDS, POLL_SLICE_S, BatchQueue
from .tokenizer import COLLECT_WAIT_S, PLACEMENTS, SUBMIT_THREADS, OffloadTokenizer, Placement, open_local

__all__ = ["AutoPolicy", "Batch", "BatchQueue", "COLLECT_WAIT_S", "CpuSplit", "MAX_TEXT_BYTES", "OffloadTokenizer",
           "Options", "PLACEMENTS", "POLL_ROUNDS", "POLL_SLICE_S", "Placement", "SUBMIT_THREADS", "Text",
           "measure_cpu", "open_local"]
