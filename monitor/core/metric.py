"""One exported metric family, as the catalog (`ragmon.core.catalog`) lists them."""

from __future__ import annotations

from dataclasses import dataclass

from ragmon.core.wire import LABEL_KEYS

SERIES_LABELS = LABEL_KEYS  # the per-series metrics' labels: an event's labels, in their order


@dataclass(frozen=True)
class Metric:
    """One exported metric family. `name` has no `_total` suffix for counters."""

    name: str
    type: str  # counter | gauge | histogram
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    of: str = ""  # for a histogram's sum of squares: the histogram's store key

    @property
    def key(self) -> str:
        """The short name the store uses (`ragmon_` stripped)."""
        return self.name.removeprefix("ragmon_")
