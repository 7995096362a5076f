"""/metrics rendered ahead of the scrapes, and histograms read in HSCAN steps that stay
consistent when an observation lands mid-read (real Redis)."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import threading

import pytest

from ragmon.api import metrics
from ragmon.core.catalog import LAG_BUCKETS
from ragmon.settings import Settings
from ragmon.store import Store


def rejected(body: bytes) -> float:
    for line in gzip.decompress(body).decode().splitlines():
        if line.startswith('ragmon_events_rejected_total{reason="invalid"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_scrapes_get_the_last_rendering_while_the_next_one_runs(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a body exists no scrape waits: a scrape past `refresh_s` is answered with the last
    body while the next rendering is under way, and the renderer keeps going between scrapes."""
    store = Store.connect(settings)
    gate = threading.Event()
    renders: list[int] = []
    real = metrics.compressed

    def counted(s: Store, *args: object) -> bytes:
        renders.append(1)
        if len(renders) > 1:
            gate.wait(10)  # the second rendering is held until the test lets it go
        return real(s, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(metrics, "compressed", counted)
    text = metrics.MetricsText(
        dataclasses.replace(settings, metrics_refresh_s=0.05, metrics_process=False), store
    )
    text.stale_s = 60.0  # however slow this machine, the last body is never too old here

    async def go() -> None:
        first = await text.body()  # the only scrape that waits
        store.record_rejection("invalid", 3)
        while len(renders) < 2:  # the renderer started the next one by itself
            await asyncio.sleep(0.01)
        during = await text.body()  # answered at once, with the last body
        assert during == first and rejected(during) == rejected(first)
        gate.set()
        while rejected(await text.body()) == rejected(first):
            await asyncio.sleep(0.01)
        assert rejected(await text.body()) == rejected(first) + 3
        text.close()

    asyncio.run(go())


def test_plain_scrapes_share_one_decompression_per_rendering(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scraper without gzip gets the text decompressed once per rendering, however many ask
    (before: once per scrape, 14.7 MB each at 500 series)."""
    store = Store.connect(settings)
    inflated: list[int] = []
    real = gzip.decompress

    def counted(data: bytes) -> bytes:
        inflated.append(1)
        return real(data)

    monkeypatch.setattr(metrics.gzip, "decompress", counted)
    text = metrics.MetricsText(
        dataclasses.replace(settings, metrics_refresh_s=3600, metrics_process=False), store
    )

    async def go() -> None:
        plain = await asyncio.gather(*(text.plain() for _ in range(4)))
        plain += [await text.plain() for _ in range(4)]
        assert all(p is plain[0] for p in plain) and inflated == [1]
        assert plain[0] == real(await text.body()) and b"ragmon_queue_depth" in plain[0]
        text.close()

    asyncio.run(go())


def test_a_histogram_read_mid_observation_stays_consistent(settings: Settings) -> None:
    """HSCAN may read a histogram's `count` before an observation and a bucket after it (or
    the reverse): the count is then the buckets' total, never below a bucket."""
    store = Store.connect(settings)
    key = store.keys.hist
    store.client.hset(key, mapping={"labeling_lag_seconds|b0": 5, "labeling_lag_seconds|b3": 2,
                                    "labeling_lag_seconds|count": 6,
                                    "labeling_lag_seconds|sum": 1.5})  # fmt: skip
    (h,) = store.histograms({"labeling_lag_seconds": LAG_BUCKETS})["labeling_lag_seconds"].values()
    assert h.count == 7 == sum(h.buckets)
    store.client.hset(key, "labeling_lag_seconds|count", 8)  # the other way round: count ahead
    (h,) = store.histograms({"labeling_lag_seconds": LAG_BUCKETS})["labeling_lag_seconds"].values()
    assert h.count == 8 and sum(h.buckets) == 7


def test_a_large_hash_is_read_whole_in_steps(settings: Settings) -> None:
    store = Store.connect(settings)
    fields = {f"f{i}": i for i in range(5000)}
    store.client.hset("big", mapping=fields)
    got = store.read_hash("big")
    assert {k.decode(): int(v) for k, v in got.items()} == fields
    calls = store.client.info("commandstats").get("cmdstat_hscan", {}).get("calls", 0)
    assert calls >= 5000 // 1000  # in HSCAN steps, not one HGETALL
