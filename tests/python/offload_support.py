"""What the offload tests share: texts, a batch the agent works on for seconds, and an agent to kill."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

import outboard


def sample_texts() -> list[str]:
    from pydoc_data.topics import topics

    docs = [t for t in topics.values() if t][:60]
    docs += ["", " ", "naïve café — Ελληνικά, русский, 日本語のテキスト 🙂🙂", "a\tb\r\nc  d\n\n", "x" * 3000]
    return docs


@pytest.fixture(params=["gpt2", "bert-base-uncased"])
def model(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def local(model: str) -> outboard.Tokenizer:
    return outboard.offload.open_local(model)


def seconds_of_work() -> list[str]:
    """A batch the agent tokenizes for seconds: 16 texts of 3.6 MB without a repeated word (a
    repeated word is cheap: a 60 MB batch of one word ended within the 0.3 s these tests wait)."""
    distinct = " ".join(f"{i * 2654435761 % 2**32:x}" for i in range(400_000))
    return [distinct] * 16


@pytest.fixture
def doomed_agent() -> Iterator[outboard.LocalAgent]:
    agent = outboard.LocalAgent().start()
    yield agent
    agent.stop()


def kill_soon(agent: outboard.LocalAgent, delay: float) -> threading.Timer:
    timer = threading.Timer(delay, lambda: os.kill(agent.pid, signal.SIGKILL))
    timer.start()
    return timer

