"""Outboard: move work off the host onto an offload agent, and measure what it buys.

This is the public API; ``outboard._core`` is private.
"""

from __future__ import annotations

from . import _core, checkpoint, errors, hf
from ._agent import LocalAgent, agent_executable
from .checkpoint import Checkpointer
from .client import Client, connect
from .errors import Error
from .graph import Executor, Graph, Instance
from .offload import AutoPolicy, Batch, BatchQueue, OffloadTokenizer
from .tokenizer import DecodeStream, Tokenizer

__version__: str = _core.version()

__all__ = ["AutoPolicy", "Batch", "BatchQueue", "Checkpointer", "Client", "DecodeStream", "Error", "Executor", "Graph", "Instance", "LocalAgent", "OffloadTokenizer", "Tokenizer", "agent_executable", "checkpoint", "connect", "errors", "hf", "__version__"]
