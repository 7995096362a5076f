"""The suite's own rules, checked from inside a test: deadlines stretch with the load."""

from __future__ import annotations

import pytest

from tests.support.waiting import MAX_STRETCH


def test_the_timeout_deadline_is_stretched_by_the_load(request: pytest.FixtureRequest) -> None:
    mark = request.node.get_closest_marker("timeout")
    assert mark is not None  # conftest's stretch_timeout put it there, ahead of the ini's 300 s
    base = float(request.config.getini("timeout"))
    assert base <= mark.args[0] <= base * MAX_STRETCH


@pytest.mark.timeout(7)
def test_a_tests_own_timeout_is_stretched_too(request: pytest.FixtureRequest) -> None:
    mark = request.node.get_closest_marker("timeout")
    assert mark is not None and 7 <= mark.args[0] <= 7 * MAX_STRETCH
    assert len(list(request.node.iter_markers("timeout"))) == 2  # the stretched one is first
