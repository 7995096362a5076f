"""Every writer of an app's data charges its ledger (`ragmon.store.ledger`): the second
judge's opinions, with the app's grades."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store.fields import Kind

NOW = 1_800_000_000.0


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    s = Store.connect(settings)
    yield s
    s.client.close()


def held(store: Store, kind: Kind) -> dict[str, float]:
    reading = store.ledger.read(NOW + 1)
    return {app: kinds[kind] for app, kinds in reading.held.items() if kind in kinds}


def test_a_second_opinion_is_charged_with_the_apps_grades(store: Store) -> None:
    record = {"app": "shop", "event_id": "e1", "first": "j1", "second": "j2",
              "pairs": [[2, 3]] * 20}  # fmt: skip
    store.second_opinions.add(record, now=NOW)
    text = json.dumps(record, separators=(",", ":"))
    assert len(text) <= held(store, Kind.GRADES)["shop"] < 2 * len(text)


def test_a_grade_written_on_a_stale_read_stores_and_charges_nothing(store: Store) -> None:
    """HUMAN_GRADES compares what the caller read with what the field holds (Lua parses no
    record): a write that read before another changed the field is refused, then read again."""
    mine = {"app": "shop", "event_id": "e1", "passage_id": "p1", "reviewer": "ann", "grade": 1,
            "note": "", "at": NOW}  # fmt: skip
    stale = store.human.read([mine])
    assert stale == [None]
    assert store.human.write([mine], now=NOW) == ["created"]
    charged = held(store, Kind.GRADES)
    changed = {**mine, "grade": 3}
    assert store.human.write_read([changed], stale, NOW) is None
    assert store.human.of_event("shop", "e1") == [mine] and held(store, Kind.GRADES) == charged
    assert store.human.write([changed], now=NOW) == ["updated"]
    assert store.human.write([{**changed, "at": NOW + 1}], now=NOW) == ["unchanged"]
    assert store.human.write([{**changed, "note": "why"}], now=NOW) == ["updated"]


def summary(size: int) -> dict[str, str]:
    """A summary as a worker keeps it: the last 7 days, six ISO weeks and the agreement."""
    names = ["last", *(f"2026-W{w:02d}" for w in range(44, 50)), "agreement"]
    return {w: json.dumps({"window": w, "series": ["x" * size]}) for w in names}


def test_a_summary_is_charged_what_it_adds_and_credited_when_replaced_or_forgotten(
    store: Store,
) -> None:
    est = store.estimates
    key = store.keys.estimates("shop")
    assert est.save("shop", summary(3000), NOW)
    big = held(store, Kind.ESTIMATES)["shop"]
    taken = int(store.client.memory_usage(key, samples=0) or 0)
    # what the ledger counts is what the summary's key takes (and its two index fields)
    assert taken <= big <= 1.2 * taken + 400
    assert est.save("shop", summary(300), NOW)  # replaced: counted once, smaller
    small = held(store, Kind.ESTIMATES)["shop"]
    taken = int(store.client.memory_usage(key, samples=0) or 0)
    assert taken <= small <= 1.2 * taken + 400 and small < big / 5
    assert est.save("news", summary(300), NOW)
    assert store.client.ttl(key) == -1  # it leaves with its charge, never on its own
    est.forget(["shop"])
    assert not store.client.exists(key)
    assert held(store, Kind.ESTIMATES).get("shop", 0) == 0
    assert held(store, Kind.ESTIMATES)["news"] == small  # another app's charge untouched
    assert store.client.exists(store.keys.estimates("news"))


def test_a_summary_past_the_apps_share_is_refused_and_another_app_summarized(
    store: Store,
) -> None:
    from dataclasses import replace

    from ragmon.workers.summaries import summarize_due

    full = Store(store.client, replace(store.settings, app_storage_mb={"shop": 0.05}))
    assert full.estimates.save("shop", {"last": "{}"}, NOW - 60)
    before = full.estimates.load("shop", "last")
    charged = held(full, Kind.ESTIMATES)["shop"]
    with full.client.pipeline(transaction=True) as pipe:  # the app now holds its share
        full.ledger.charge(pipe, "shop", Kind.RECORD, int(0.05 * 1024 * 1024), time.time())
        pipe.execute()
    full.estimates.want(["shop", "news"])
    assert summarize_due(full, time.time()) == ["news", "shop"]
    assert full.estimates.load("shop", "last") == before  # its last summary stays
    assert full.estimates.summarized_at()["shop"] == NOW - 60
    assert held(full, Kind.ESTIMATES)["shop"] == charged
    assert full.estimates.load("news", "last") is not None  # the other app is summarized
    assert held(full, Kind.ESTIMATES)["news"] > 0


def test_pacing_fields_are_charged_to_their_app_once_and_leave_with_their_window(
    store: Store,
) -> None:
    from ragmon.core.sampling import APP_MARK
    from ragmon.store.ledger import BUCKETS, windows

    i = int(NOW // 60)
    shop = [f"shop|kb{j}|bm25|all" for j in range(600)]  # past listpack: a hashtable
    chosen = {(i, s): (3, 0.75) for s in shop} | {(i, APP_MARK + "shop"): (120, 30.0)}
    chosen |= {(i, "news|kb|bm25|all"): (1, 1.0), (i, APP_MARK + "news"): (1, 1.0)}
    keys = [store.keys.pace(i, "n"), store.keys.pace(i, "p")]
    store.sampling.pace(i, chosen, NOW)
    grown = sum(int(store.client.memory_usage(k, samples=0) or 0) for k in keys)
    pace = held(store, Kind.PACE)
    assert set(pace) == {"shop", "news"} and pace["news"] < pace["shop"] / 10
    assert sum(pace.values()) == pytest.approx(grown, rel=0.3)
    store.client.expire(keys[0], 5)
    store.sampling.pace(i, chosen, NOW + 1)  # the same fields again: not charged again
    assert held(store, Kind.PACE) == pace
    assert 0 < int(store.client.ttl(keys[0])) <= 5  # a later write does not renew the hash
    assert 170 < int(store.client.ttl(keys[1])) <= 180
    window = windows(store.settings)[Kind.PACE]
    after = store.ledger.read(NOW + window + 2 * window / BUCKETS)
    assert Kind.PACE not in after.held.get("shop", {})


def test_an_apps_finished_event_asks_for_its_summary_when_missing_or_stale(
    store: Store,
) -> None:
    from ragmon.store.estimate_summaries import FRESH_S

    est, due = store.estimates, store.keys.estimates_due
    est.freshen("shop", NOW)  # its first judged event: no summary yet, the whole summary
    assert store.client.smembers(due) == {b"shop"} and store.delivery.jobs.waiting() == 1
    assert est.due() == {"shop": False}
    est.save("shop", summary(10), NOW + 1)
    est.freshen("shop", NOW + 2)
    est.freshen("shop", NOW + FRESH_S / 2)
    assert store.client.smembers(due) == set()  # fresh: not asked again
    est.freshen("shop", NOW + 1 + FRESH_S)  # new events, and the summary is FRESH_S old
    assert est.due() == {"shop": True}  # only the windows new events fall in
    est.want(["shop"], recent=True)
    est.want(["shop"])  # people graded meanwhile: the whole summary
    assert est.due() == {"shop": False}


def test_new_events_refresh_only_their_windows_and_the_charge_follows(store: Store) -> None:
    from datetime import UTC, datetime

    from ragmon.oversight import AGREEMENT, LAST, Oversight, summarize, summary_windows

    oversight = Oversight(store, store.settings.measure_params())
    full = summarize(oversight, "shop", NOW, 35)
    assert store.estimates.save("shop", full, NOW)
    store.client.config_resetstat()
    recent = summarize(oversight, "shop", NOW + 60, 35, recent=True)
    today = datetime.fromtimestamp(NOW, UTC).date()
    windows = summary_windows(today, 35)
    assert LAST in recent and AGREEMENT not in recent and len(recent) == 2  # and this week
    days = {d for k in recent for d in windows[k].days}
    assert int(store.client.info("commandstats")["cmdstat_lrange"]["calls"]) == len(days) < 14
    assert store.estimates.save("shop", recent, NOW + 60, recent=True)
    assert store.estimates.load("shop", AGREEMENT) == full[AGREEMENT]  # the others kept
    assert store.estimates.load("shop", LAST) == recent[LAST]
    assert store.estimates.summarized_at()["shop"] == NOW  # the whole summary's time
    taken = int(store.client.memory_usage(store.keys.estimates("shop"), samples=0) or 0)
    assert taken <= held(store, Kind.ESTIMATES)["shop"] <= 1.2 * taken + 400


def test_a_summary_reads_each_day_once(store: Store) -> None:
    from datetime import UTC, datetime

    from ragmon.oversight import Oversight, summarize, summary_windows

    oversight = Oversight(store, store.settings.measure_params())
    store.client.config_resetstat()
    found = summarize(oversight, "shop", NOW, 35)
    stats = store.client.info("commandstats")
    windows = summary_windows(datetime.fromtimestamp(NOW, UTC).date(), 35).values()
    days = [d for w in windows for d in w.days]
    assert len(found) == len(windows) + 1  # and the agreement
    assert len(set(days)) < len(days)  # the last 7 days lie in the ISO weeks
    assert int(stats["cmdstat_lrange"]["calls"]) == len(set(days))  # each day read once
    assert int(stats["cmdstat_zrange"]["calls"]) == 1  # people's grades read once
