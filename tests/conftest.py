"""Shared fixtures: a real Redis server per test session, flushed around each test; and the
test tiers (`scripts/test --unit`, `--quick`, everything), kept honest while the tests run.

The tiers are markers: `slow` (long waits, faults, real Prometheus, the simulations of
tests/stats), `bench` (short benchmark runs), `process` (starts a child process: `ragmon
serve`, workers, an RQ work horse, a CLI run, a Redis of its own, the API's decoding, /metrics
or overview child) and `server` (the real API in this process, over HTTP). `--quick` leaves out
`slow` and `bench`; `--unit` leaves out `process` and `server` too: pure code and the session's
one Redis.
A test gets `process` or `server` from the fixture it uses (PROCESS_FIXTURES, SERVER_FIXTURES)
or from its own mark, `slow` from its folder (FOLDER_MARKS) or its own mark; one that starts a
child process without `process`, `slow` or `bench` fails at teardown, naming what it started, so
a new test cannot land in a faster tier than it belongs to.
"""

from __future__ import annotations

import multiprocessing.process
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from ragmon.settings import Settings
from tests.support.stack import JUDGE_EVERY_EVENT, RedisServer, Stack
from tests.support.waiting import stretch

if TYPE_CHECKING:  # imported when first used: the API pulls in FastAPI and the whole server
    from tests.support.api_server import ApiServer

# Every run ends with the tests that cost the most CPU, children included (each under ~20 s).
pytest_plugins = ["tests.support.cpu_report"]

# ../shared/data/trec-dl beside the checkout; TREC_DL_DIR names another place (a worktree's).
SHARED_DATA = Path(
    os.environ.get("TREC_DL_DIR")
    or Path(__file__).resolve().parents[2] / "shared" / "data" / "trec-dl"
)

# Fixtures that start child processes: every test that uses one (directly or through another
# fixture) is marked `process`.
PROCESS_FIXTURES = frozenset({"stack", "aof_redis", "own_redis", "promtool", "browser"})
# Fixtures that run the real API in this process (FastAPI under uvicorn in a thread, a store,
# real HTTP): their users are marked `server`.
SERVER_FIXTURES = frozenset({"api", "make_api"})
TIER_MARKS = ("slow", "bench", "process")  # a test with any of these may start processes
# Folders whose every test takes a mark: the simulations take seconds of CPU each.
FOLDER_MARKS = {Path(__file__).parent / "stats": "slow"}


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with _Spawns.allowed():
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
    env = {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", "RAGMON_METRICS_REFRESH_S": "0",
           **JUDGE_EVERY_EVENT}  # fmt: skip
    return Settings.from_env(env, dotenv=None)


@pytest.fixture(scope="session")
def trec_dl() -> Path:
    """The shared TREC DL data; tests that need it skip with a message when it is absent."""
    if not (SHARED_DATA / "trec-dl-top20.jsonl").is_file():
        pytest.skip(f"shared TREC DL data not found at {SHARED_DATA}")
    return SHARED_DATA


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("RAGMON_TEST", "1")
    _Spawns.install()
    # Hypothesis' default per-example deadline is a wall-clock assert that fails on a busy
    # machine; a test that wants a bound on time is a benchmark.
    import hypothesis

    hypothesis.settings.register_profile("ragmon", deadline=None)
    hypothesis.settings.load_profile("ragmon")


@pytest.fixture
def stack(redis_url: str) -> Iterator[Stack]:
    """The API and two workers as real processes on the test Redis (lexical judge)."""
    s = Stack(redis_url, workers=2).start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def promtool() -> str:
    """Prometheus' promtool (Debian's `prometheus` package), or the test skips."""
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not found: install Debian's `prometheus` package (scripts/test does)")
    return path


@pytest.fixture
def make_api(redis_url: str) -> Iterator[Callable[..., ApiServer]]:
    """Start the real API in-process with extra settings: `make_api(RAGMON_SAMPLE_RATE="0.5")`."""
    from tests.support.api_server import ApiServer

    servers: list[ApiServer] = []

    def make(**env: str) -> ApiServer:
        s = Settings.from_env(
            {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", **JUDGE_EVERY_EVENT, **env},
            dotenv=None,
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


# In-process RQ workers (`make_worker(...).work(burst=True)`) fork a work horse per drain job,
# and a drain job ends only after DRAIN_IDLE_S without work (2 s in service): a test waited that
# long after its last event for every drain job it ran (tests marked process or slow: the
# others start no worker). Workers started as processes (Stack, `ragmon worker`) keep the
# service's figure.
DRAIN_IDLE_S = 0.2


@pytest.fixture(autouse=True)
def _quick_drain_idle(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if not any(request.node.get_closest_marker(m) for m in ("process", "slow")):
        return  # an in-process worker forks: such a test is marked process (or slow)
    from ragmon.workers import jobs

    defaults = jobs.drain_pending.__defaults__
    assert defaults == (jobs.DRAIN_MAX_S, jobs.IDLE_S), defaults  # (max_s, idle_s)
    monkeypatch.setattr(jobs.drain_pending, "__defaults__", (jobs.DRAIN_MAX_S, DRAIN_IDLE_S))


# The SDK's threads and relay run at the lowest priority (SCHED_IDLE), where beside two
# CPU-bound processes a relay starting cold got no CPU for seconds: a test of what the SDK sends
# failed its wait. They run at normal priority here but in the tests marked `lowest_priority`,
# which check that priority and what close() delivers under it.
@pytest.fixture(autouse=True)
def _sdk_at_normal_priority(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if request.node.get_closest_marker("lowest_priority") is None:
        from ragmon.client import state

        monkeypatch.setattr(state, "IDLE_THREADS", False)


# ---- tiers -----------------------------------------------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if PROCESS_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.process)
        if SERVER_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.server)
        for folder, mark in FOLDER_MARKS.items():
            if item.path.is_relative_to(folder):
                item.add_marker(mark)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A test module that `-m` cannot select whatever its tests add (its `pytestmark` or its
    folder's mark rules it out) is not imported: `--unit` and `--quick` processes each skipped
    importing the frameworks and simulations only their excluded tests use."""
    name = collection_path.name
    if not (name.startswith("test_") and name.endswith(".py")) or not config.option.markexpr:
        return None
    marks = static_marks(collection_path)
    return True if marks and never_selected(config.option.markexpr, marks) else None


def static_marks(path: Path) -> set[str]:
    """The marks every test of the module has before it runs: its folder's and its
    `pytestmark` (a mark or a list of marks, read from the source, not imported)."""
    import ast

    marks = {mark for folder, mark in FOLDER_MARKS.items() if path.is_relative_to(folder)}
    for node in ast.parse(path.read_bytes()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            for sub in ast.walk(node.value):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Attribute)
                    and sub.value.attr == "mark"
                ):
                    marks.add(sub.attr)
    return marks


def never_selected(markexpr: str, marks: set[str]) -> bool:
    """Whether `-m markexpr` is false for a test with `marks` and any others it names."""
    import itertools
    import re

    from _pytest.mark.expression import Expression

    if "(" in markexpr:  # marks with arguments: decided per test
        return False
    names = set(re.findall(r"[A-Za-z_]\w*", markexpr)) - {"and", "or", "not"} - marks
    if len(names) > 8:
        return False
    expression = Expression.compile(markexpr)
    for n in range(len(names) + 1):
        for extra in itertools.combinations(sorted(names), n):
            have = marks | set(extra)
            if expression.evaluate(lambda name, have=have, **_: name in have):
                return False
    return True


class _Spawns:
    """The child processes started while a test runs (through subprocess, multiprocessing or
    os.fork), from any thread; the session's Redis is allowed."""

    item: pytest.Item | None = None
    seen: list[str] = []  # noqa: RUF012 - one list per test process, reset per test
    _allowed = 0

    @classmethod
    def note(cls, what: str) -> None:
        if cls.item is not None and not cls._allowed and not _importing() and not _caching():
            cls.seen.append(what)

    @classmethod
    def allowed(cls) -> Any:
        import contextlib

        @contextlib.contextmanager
        def allow() -> Iterator[None]:
            cls._allowed += 1
            try:
                yield
            finally:
                cls._allowed -= 1

        return allow()

    @classmethod
    def install(cls) -> None:
        """Wrap the three ways a test process starts a child (once per process)."""
        if getattr(subprocess.Popen, "_ragmon_watched", False):
            return
        execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]
        start = multiprocessing.process.BaseProcess.start
        fork = os.fork

        def watched_execute_child(self: subprocess.Popen, args: Any, *a: Any, **k: Any) -> Any:
            cls.note(
                f"subprocess {' '.join(map(str, args)) if isinstance(args, list) else args}"[:120]
            )
            return execute_child(self, args, *a, **k)

        def watched_start(self: multiprocessing.process.BaseProcess) -> None:
            cls.note(f"multiprocessing {self.name}")
            start(self)

        def watched_fork() -> int:
            cls.note("os.fork")
            return fork()

        subprocess.Popen._execute_child = watched_execute_child  # type: ignore[attr-defined]
        subprocess.Popen._ragmon_watched = True  # type: ignore[attr-defined]
        multiprocessing.process.BaseProcess.start = watched_start  # type: ignore[method-assign]
        os.fork = watched_fork


def _called_from(test: Callable[[str], bool]) -> bool:
    """Whether a frame of the caller's stack (above `_Spawns.note`) is in a file `test` accepts."""
    frame = sys._getframe(3)
    while frame is not None:
        if test(frame.f_code.co_filename):
            return True
        frame = frame.f_back
    return False


def _importing() -> bool:
    """Whether a module is being imported: a library that runs a helper while it loads
    (trio's `ctypes.util.find_library` runs `ldconfig -p`) does so in whichever test first
    imports it, so that child says nothing about the test."""
    return _called_from(lambda name: name.startswith("<frozen importlib"))


def _caching() -> bool:
    """Whether the standard library's `platform` module runs its one `uname -p` of the process
    (`platform.processor()`, cached; the OpenAI client asks for it on its first request): that
    child, too, says nothing about the test that happens to come first."""
    return _called_from(lambda name: name.endswith("/platform.py"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Runs before pytest-timeout reads the test's deadline: see `stretch_timeout`."""
    stretch_timeout(item)
    _Spawns.item, _Spawns.seen = item, []
    try:
        return (yield)
    finally:
        _Spawns.item = None


def stretch_timeout(item: pytest.Item) -> None:
    """pytest-timeout's deadline (the ini's, or a test's own mark) stretched by the load when
    the test starts, as every wait in the suite is: beside two busy loops at load 11, promtool's
    quality-alert tests took over the fixed 300 s."""
    mark = item.get_closest_marker("timeout")
    base = (mark.args[0] if mark.args else mark.kwargs.get("timeout")) if mark else None
    if base is None:
        base = float(item.config.getini("timeout") or 0)
    if base:
        item.add_marker(pytest.mark.timeout(float(base) * stretch()), append=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    result = yield
    if _Spawns.seen and not any(item.get_closest_marker(m) for m in TIER_MARKS):
        started = "; ".join(dict.fromkeys(_Spawns.seen))
        raise pytest.fail.Exception(
            f"this test started a child process ({started}) but is in the --unit tier: mark it "
            "@pytest.mark.process (or slow), or add the fixture that starts it to "
            "PROCESS_FIXTURES in tests/conftest.py",
            pytrace=False,
        )
    return result


# ---- the fault tests' figures ----------------------------------------------------------------

_FIGURE_LINES: list[str] = []  # the fault tests' figures (tests/reliability), from their reports


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown" and report.user_properties:
        from tests.reliability.support import FIGURE

        _FIGURE_LINES.extend(str(v) for k, v in report.user_properties if k == FIGURE)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURE_LINES:
        terminalreporter.section("reliability figures")
        for line in _FIGURE_LINES:
            terminalreporter.write_line(line)
