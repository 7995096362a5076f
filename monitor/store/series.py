"""The series budget: which `app|index|retriever|segment` series get their own name on /metrics.

A new series is admitted while the fleet holds fewer than RAGMON_MAX_SERIES and its app fewer
than RAGMON_MAX_SERIES_PER_APP (the check is in `scripts.FINISH`, atomic with the recording);
past either it is folded (`keys.fold`) into `app|other|other|other` (or all-`other` for an app
without any series) and counted in `series_folded|app`. So a key bound to one app can fill only
that app's share. A series none of whose events was recorded for RAGMON_SERIES_IDLE_DAYS is
freed: its slot and its lifetime histograms go (`ragmon series` lists and frees by hand).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import redis

from ragmon.core.catalog import ALL as METRICS
from ragmon.core.metric import SERIES_LABELS
from ragmon.core.wire import SEP, field_name, series_app, series_values
from ragmon.store import scripts
from ragmon.store.fields import Name, Part
from ragmon.store.keys import Keys

if TYPE_CHECKING:
    from ragmon.settings import Settings

SWEEP_EVERY_S = 3600  # one sweep of idle series per hour for the whole fleet
SWEEP_BATCH = 500


@dataclass(frozen=True)
class SeriesRow:
    """One admitted series and when an event of it was last recorded (unix seconds)."""

    labels: tuple[str, ...]
    last_seen: float

    @property
    def name(self) -> str:
        return field_name(*self.labels)


def _series_fields() -> list[str]:
    """Every lifetime-histogram field of one series, the series left out: name, part, name,
    part ... (`retrieval_ndcg`, `b0`, ...), as FREE_SERIES reads them."""
    out: list[str] = []
    for m in METRICS:
        if m.type == "histogram" and m.labels == SERIES_LABELS:
            parts = [f"{Part.BUCKET}{i}" for i in range(len(m.buckets) + 1)]
            for part in (*parts, Part.SUM, Part.SUMSQ, Part.COUNT):
                out += [m.key, part]
    return out


class SeriesBudget:
    """Reads and frees the admitted series of one store."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        settings: Settings,
        counters: Callable[[], Mapping[str, float]],
    ) -> None:
        self.client = client
        self.keys = keys
        self.settings = settings
        self._counters = counters  # the lifetime counters, read as `Store.counters` reads them
        self._free = client.register_script(scripts.FREE_SERIES.source)

    def rows(self) -> list[SeriesRow]:
        """Admitted series, least recently seen first."""
        raw: Any = self.client.zrange(self.keys.series, 0, -1, withscores=True)
        return [SeriesRow(series_values(m.decode()), float(t)) for m, t in raw]

    def admitted(self) -> set[str]:
        """The admitted series' names."""
        return {m.decode() for m in cast(list[bytes], self.client.zrange(self.keys.series, 0, -1))}

    def folded(self) -> dict[str, int]:
        """Events recorded under a folded series, by app (`other`: apps without a series)."""
        prefix = f"{Name.SERIES_FOLDED}{SEP}"
        return {
            k.removeprefix(prefix): int(v)
            for k, v in self._counters().items()
            if k.startswith(prefix)
        }

    def free(self, series: Iterable[str]) -> int:
        """Free these series (`app|index|retriever|segment`); returns how many were admitted."""
        wanted = list(series)
        fields = _series_fields()
        k = self.keys
        freed = 0
        for i in range(0, len(wanted), SWEEP_BATCH):
            chunk = wanted[i : i + SWEEP_BATCH]
            call = scripts.FREE_SERIES.call(
                keys={"series": k.series, "series_per_app": k.series_per_app, "hist": k.hist},
                args={"n_fields": len(fields) // 2},
                more_args=[*fields, *(x for s in chunk for x in (s, series_app(s)))],
            )
            freed += int(self._free(keys=call.keys, args=call.args))
        return freed

    def idle(self, now: float, days: float | None = None) -> list[str]:
        """The series none of whose events was recorded in the last `days` (default
        RAGMON_SERIES_IDLE_DAYS)."""
        days = self.settings.series_idle_days if days is None else days
        cutoff = now - days * 86400
        raw: Any = self.client.zrangebyscore(self.keys.series, "-inf", f"({cutoff}")
        return [m.decode() for m in raw]

    def free_idle(self, now: float, days: float | None = None) -> int:
        return self.free(self.idle(now, days))
