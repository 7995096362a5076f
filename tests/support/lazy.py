"""A module imported when a test first reads one of its names, not when its test module is
collected: every test process collects every test module, so a heavy import there (scipy:
about a second) is paid by each process even when none of its tests need it."""

from __future__ import annotations

import importlib
from typing import Any


class Lazy:
    """`stats = Lazy("scipy.stats")`: `stats.t.ppf(...)` imports scipy.stats on first use."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)
