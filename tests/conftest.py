"""Shared fixtures: a real Redis server per test session, flushed around each test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from ragmon.settings import Settings
from tests.reliability.support import FIGURE
from tests.support.api_server import ApiServer
from tests.support.stack import RedisServer, Stack

# ../shared/data/trec-dl beside the checkout; TREC_DL_DIR names another place (a worktree's).
SHARED_DATA = Path(
    os.environ.get("TREC_DL_DIR")
    or Path(__file__).resolve().parents[2] / "shared" / "data" / "trec-dl"
)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield redis_server.url
    client.flushall()
    client.close()


@pytest.fixture
def settings(redis_url: str) -> Settings:
    """Settings for a test: a fresh Redis, the lexical judge, no .env file."""
    env = {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", "RAGMON_METRICS_REFRESH_S": "0"}
    return Settings.from_env(env, dotenv=None)


@pytest.fixture(scope="session")
def trec_dl() -> Path:
    """The shared TREC DL data; tests that need it skip with a message when it is absent."""
    if not (SHARED_DATA / "trec-dl-top20.jsonl").is_file():
        pytest.skip(f"shared TREC DL data not found at {SHARED_DATA}")
    return SHARED_DATA


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("RAGMON_TEST", "1")


@pytest.fixture
def stack(redis_url: str) -> Iterator[Stack]:
    """The API and two workers as real processes on the test Redis (lexical judge)."""
    s = Stack(redis_url, workers=2).start()
    yield s
    s.stop()


@pytest.fixture
def make_api(redis_url: str) -> Iterator[Callable[..., ApiServer]]:
    """Start the real API in-process with extra settings: `make_api(RAGMON_SAMPLE_RATE="0.5")`."""
    servers: list[ApiServer] = []

    def make(**env: str) -> ApiServer:
        s = Settings.from_env(
            {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", **env}, dotenv=None
        )
        server = ApiServer(s).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def api(make_api: Callable[..., ApiServer]) -> ApiServer:
    return make_api()


_FIGURE_LINES: list[str] = []  # the fault tests' figures (tests/reliability), from their reports


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        _FIGURE_LINES.extend(str(v) for k, v in report.user_properties if k == FIGURE)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURE_LINES:
        terminalreporter.section("reliability figures")
        for line in _FIGURE_LINES:
            terminalreporter.write_line(line)
