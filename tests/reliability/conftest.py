"""Fixtures of the fault tests: a Redis with AOF of its own, the fake LLM, the figures summary."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.support import FIGURES
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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("reliability figures")
        for tally in FIGURES:
            terminalreporter.write_line(tally.line())
