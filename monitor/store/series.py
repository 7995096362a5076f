"""The series budget: which `app|index|retriever|segment` series get their own name on /metrics.

A new series is admitted while the fleet holds fewer than RAGMON_MAX_SERIES and its app fewer
than RAGMON_MAX_SERIES_PER_APP (the check is in `scripts.FINISH`, atomic with the recording);
past either it is folded into `app|other|other|other` (or all-`other` for an app without any
series) and counted in `series_folded|app`. So a key bound to one app can fill only that app's
share. A series none of whose events was recorded for RAGMON_SERIES_IDLE_DAYS is freed: its slot
and its lifetime histograms go (`ragmon series` lists and frees by hand).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from monitor.catalog import ALL as METRICS
from monitor.catalog import SERIES_LABELS
from monitor.store import scripts
from monitor.store.keys import SEP

if TYPE_CHECKING:
    from monitor.store import Store

SWEEP_EVERY_S = 3600  # one sweep of idle series per hour for the whole fleet
SWEEP_BATCH = 500


@dataclass(frozen=True)
class SeriesRow:
    """One admitted series and when an event of it was last recorded (unix seconds)."""

    labels: tuple[str, ...]
    last_seen: float

    @property
    def name(self) -> str:
        return SEP.join(self.labels)


def _series_fields() -> list[str]:
    """Every lifetime-histogram field of one series, without its labels (`name|b0` ...)."""
    out = []
    for m in METRICS:
        if m.type == "histogram" and m.labels == SERIES_LABELS:
            parts = [f"b{i}" for i in range(len(m.buckets) + 1)] + ["sum", "sumsq", "count"]
            out += [f"{m.key}{SEP}{p}" for p in parts]
    return out


class SeriesBudget:
    """Reads and frees the admitted series of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._free = store.client.register_script(scripts.FREE_SERIES)

    def rows(self) -> list[SeriesRow]:
        """Admitted series, least recently seen first."""
        raw: Any = self.store.client.zrange(self.store.keys.series, 0, -1, withscores=True)
        return [SeriesRow(tuple(m.decode().split(SEP)), float(t)) for m, t in raw]

    def folded(self) -> dict[str, int]:
        """Events recorded under a folded series, by app (`other`: apps without a series)."""
        prefix = f"series_folded{SEP}"
        return {
            k.removeprefix(prefix): int(v)
            for k, v in self.store.counters().items()
            if k.startswith(prefix)
        }

    def free(self, series: Iterable[str]) -> int:
        """Free these series (`app|index|retriever|segment`); returns how many were admitted."""
        wanted = list(series)
        fields = _series_fields()
        keys = [self.store.keys.series, self.store.keys.series_per_app, self.store.keys.hist]
        freed = 0
        for i in range(0, len(wanted), SWEEP_BATCH):
            chunk = wanted[i : i + SWEEP_BATCH]
            freed += int(self._free(keys=keys, args=[len(fields), *fields, *chunk]))
        return freed

    def idle(self, now: float, days: float | None = None) -> list[str]:
        """The series none of whose events was recorded in the last `days` (default
        RAGMON_SERIES_IDLE_DAYS)."""
        days = self.store.settings.series_idle_days if days is None else days
        cutoff = now - days * 86400
        raw: Any = self.store.client.zrangebyscore(self.store.keys.series, "-inf", f"({cutoff}")
        return [m.decode() for m in raw]

    def free_idle(self, now: float, days: float | None = None) -> int:
        return self.free(self.idle(now, days))
