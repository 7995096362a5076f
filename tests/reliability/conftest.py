"""Fixtures of the fault tests: a Redis with AOF of its own, the fake LLM, the figures summary."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.support import FIGURE, FIGURES
from tests.support.fake_llm import FakeLLM
from tests.support.stack import RedisServer


@pytest.fixture
def aof_redis() -> Iterator[RedisServer]:
    """A Redis of the test's own (appendonly yes, appendfsync always), so it may be killed."""
    server = RedisServer(appendonly=True).start()
    yield server
    server.cleanup()


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    fake = FakeLLM().start()
    yield fake
    fake.stop()


def llm_env(fake: FakeLLM, **extra: str) -> dict[str, str]:
    """Settings that point the workers' OpenAI judge at the fake server."""
    return {
        "RAGMON_JUDGE": "openai",
        "OPENAI_BASE_URL": fake.url,
        "OPENAI_API_KEY": "x",
        "RAGMON_JOB_BATCH_SIZE": "4",
        **extra,
    }


@pytest.fixture(autouse=True)
def figures_in_the_report(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test's fault figures travel in its report (`user_properties`), so the session's summary
    (tests/conftest.py) has them when the tests run in xdist worker processes too."""
    before = len(FIGURES)
    yield
    for tally in FIGURES[before:]:
        request.node.user_properties.append((FIGURE, tally.line()))
