"""Fixtures: real outboard-agent processes, real UCX connections."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

import outboard

#: Test files `make check` leaves to `make test`: they run benchmarks, start hundreds of
#: clients, or tokenize whole corpora.
SLOW = ("test_bench_", "test_hostile", "exactness")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(part.startswith(SLOW) for part in item.path.parts[-2:]):
            item.add_marker(pytest.mark.slow)


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
