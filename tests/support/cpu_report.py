"""The CPU each test costs, its child processes included: every run (`tests/conftest.py` loads
this plugin) prints the costliest tests at the end (CONTRIBUTING: no test needs more than ~20 s
of CPU).

A test's CPU is what this process and its descendants spent from its setup to its teardown
(servers a fixture started count where they run): this process's own and its reaped
children's (RUSAGE_CHILDREN), plus each live descendant's own and its reaped children's. A
descendant that ends during a test moves from the second sum to the first, so a module's
server stopped after its last test charges that test its last minutes, not its whole life.
It travels in the teardown report's user properties, so with xdist the main process prints
every worker's tests.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import psutil
import pytest

CPU = "cpu_seconds"
SHOWN = 15


def _tree() -> dict[int, float]:
    here = psutil.Process(os.getpid())
    out: dict[int, float] = {}
    for p in here.children(recursive=True):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[p.pid] = t.user + t.system + t.children_user + t.children_system
    return out


def _own() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


_started: dict[str, tuple[float, dict[int, float]]] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _started[item.nodeid] = (_own(), _tree())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if call.when == "teardown" and item.nodeid in _started:
        before, tree = _started.pop(item.nodeid)
        spent = _own() - before + sum(_tree().values()) - sum(tree.values())
        report.user_properties.append((CPU, round(spent, 2)))
    return report


_costs: list[tuple[float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        for key, value in report.user_properties:
            if key == CPU:
                _costs.append((float(value), report.nodeid))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _costs:
        return
    terminalreporter.section("CPU per test (this process and its children)")
    for seconds, nodeid in sorted(_costs, reverse=True)[:SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {nodeid}")
    terminalreporter.write_line(f"{sum(s for s, _ in _costs):8.1f} s  in all")
