"""Fixtures: real outboard-agent processes, real UCX connections."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

import outboard


@pytest.fixture
def start_agent() -> Iterator[Callable[..., outboard.LocalAgent]]:
    agents: list[outboard.LocalAgent] = []

    def start(*args: str, log_level: str | None = None) -> outboard.LocalAgent:
        agent = outboard.LocalAgent(*args, log_level=log_level).start()
        agents.append(agent)
        return agent

    yield start
    for a in agents:
        a.stop()


@pytest.fixture
def agent(start_agent: Callable[..., outboard.LocalAgent]) -> outboard.LocalAgent:
    return start_agent()


@pytest.fixture
def client(agent: outboard.LocalAgent) -> Iterator[outboard.Client]:
    c = outboard.connect(agent.address)
    yield c
    c.close()
