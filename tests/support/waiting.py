"""Waits that scale with how busy the machine is: a deadline fit for an idle machine is
stretched by the load per CPU while the wait runs, so a test that waits on real processes does
not fail only because other work shares the CPUs (the machine is shared; CI is not idle)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
MAX_STRETCH = 10.0  # a wait never grows past 10x its idle figure: a hang still fails


def stretch() -> float:
    """How much longer things take now than on an idle machine: the 1-minute load per CPU,
    at least 1, at most MAX_STRETCH."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(MAX_STRETCH, max(1.0, load))


def scaled(seconds: float) -> float:
    """`seconds` (enough on an idle machine) stretched by the present load."""
    return seconds * stretch()


def wait_until(check: Callable[[], T], seconds: float, what: str, every: float = 0.05) -> T:
    """The first truthy `check()`; AssertionError naming `what` once `seconds` (scaled by
    the load, re-read while waiting) have passed without one."""
    start = time.monotonic()
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() - start > scaled(seconds):
            raise AssertionError(f"{what}: not within {scaled(seconds):.0f} s")
        time.sleep(every)
