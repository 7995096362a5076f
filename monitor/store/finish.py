"""The arguments of an event's last step, built without I/O: what a judged event adds to the
histograms, the counters, the series budget and the per-day record (`scripts.FINISH`), or how
a failed one is kept (`scripts.FAIL`)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ragmon.core.catalog import LAG_BUCKETS
from ragmon.core.measures import HISTOGRAM_MEASURES
from ragmon.core.wire import field_parts, series_name, split_ref
from ragmon.store import scripts
from ragmon.store.keys import OTHER, fold
from ragmon.store.ledger import KEY_OVERHEAD, Ledger, allocated, entry_bytes
from ragmon.store.protocol import Call
from ragmon.store.records import (
    Result,
    StoredEvent,
    bucket_index,
    day_record,
    event_day,
    failed_result,
    ref_of,
    result_ttl_s,
    text_ttl_s,
    without_texts,
)

if TYPE_CHECKING:
    from ragmon.settings import Settings
    from ragmon.store.keys import Keys

DAY_EVENTS_KEEP = 50_000  # per-day records kept per app and day (the newest)
EXPLORE_FACTOR = 2  # an explorer entry's bytes over its per-day record's


def day_keys(keys: Keys, event: StoredEvent) -> tuple[str, str, str, str]:
    """The per-day keys FINISH writes for `event` (its day's histograms, counters, its app's
    records, and the day's set of apps with records)."""
    day, k = event_day(event), keys
    app = event["labels"]["app"]
    return k.day_hist(day), k.day_counters(day), k.day_events(day, app), k.day_apps(day)


def day_records_ttl_s(settings: Settings) -> int:
    """How long an app's per-day records are kept: RAGMON_RESULT_TTL_DAYS after their day,
    and at least the two weeks the weekly report compares."""
    return max(result_ttl_s(settings), 15 * 86400) + 86400


def finish_call(
    keys: Keys,
    settings: Settings,
    bounds: Mapping[str, Sequence[float]],
    event: StoredEvent,
    result: Result,
    grades: Sequence[int | None],
    now: float,
    stripped_payload: str | None = None,
    judge: str | None = None,
    series_counts: dict[str, int] | None = None,
    inclusion: float | None = None,
) -> Call:
    """FINISH for one event and its result (arguments as `Store.finish`'s)."""
    s, k = settings, keys
    measures = result["measures"]
    app = result["labels"]["app"]
    lag = max(0.0, now - event["_received_at"])
    obs: list[Any] = []
    for m in HISTOGRAM_MEASURES:  # a NaN or an infinity would fail FINISH half-way
        if (v := measures.get(m)) is not None and math.isfinite(v):
            obs += [f"retrieval_{m}", bucket_index(bounds[m], v), repr(float(v))]
    folded, folded_count = fold(app)
    orphan, orphan_count = fold(OTHER)
    counts = sorted(  # `name` or `name|reason`: (name, reason or "", n)
        (*(field_parts(name) + [""])[:2], n) for name, n in (series_counts or {}).items()
    )
    day_hist, day_counters, day_events, day_apps = day_keys(keys, event)
    ref = ref_of(event)
    keep_s = text_ttl_s(s)  # 0: the texts go now; the record's TTL or more: they stay in it
    texts_s = keep_s if keep_s < result_ttl_s(s) else 0
    compact = stripped_payload or (without_texts(event) if keep_s < result_ttl_s(s) else "")
    result_json = json.dumps(result, separators=(",", ":"))
    day_json = json.dumps(
        day_record(event, result, grades, judge,
                   inclusion if inclusion is not None else inclusion_probability(s, event)),
        separators=(",", ":"),
    )  # fmt: skip
    record = record_bytes(k.event(ref), compact, result_json, day_json, texts_s > 0)
    ledger_keys, ledger_args = Ledger(None, k, s).slots(scripts.FINISH_KINDS, now)
    return scripts.FINISH.call(
        keys={
            "event": k.event(ref_of(event)), "hist": k.hist, "day_hist": day_hist,
            "counters": k.counters, "day_counters": day_counters, "series": k.series,
            "day_events": day_events, "failed": k.failed, "series_per_app": k.series_per_app,
            "leased": k.leased, "pending": k.pending(app),
            "day_apps": day_apps, "app_failed": k.app_failed(app), "texts": k.event_texts(ref),
            **ledger_keys,
        },
        args={
            "result": result_json,
            "ttl": result_ttl_s(settings),
            "app": app,
            "series": series_name(result["labels"]),
            "folded": folded, "folded_count": folded_count,
            "orphan": orphan, "orphan_count": orphan_count,
            "max_series": s.max_series, "max_series_per_app": s.max_series_per_app,
            "now": int(now),
            "day_record": day_json,
            "day_keep": DAY_EVENTS_KEEP,
            "payload": compact,
            "lag": repr(lag),
            "lag_bucket": bucket_index(LAG_BUCKETS, lag),
            "k": event["k"],
            "ref": ref,
            "n_obs": len(obs) // 3,
            "weight": repr(weight(s, event, inclusion)),
            "text_ttl": texts_s,
            "record_bytes": record,
            **ledger_args,
        },
        lists={"series_counts": [x for c in counts for x in c]},
        more_args=[*obs, *(g for g in grades if g is not None)],
    )  # fmt: skip


def record_bytes(key: str, compact: str, result: str, day: str, split: bool) -> int:
    """What a judged event's record takes: its hash (compact payload, result; the texts' new
    key when they move out of it), its per-day record and its explorer entries (a record of
    about the per-day one's size, and its members in the time and measure indexes)."""
    own = entry_bytes(key, compact, result) + (KEY_OVERHEAD if split else 0)
    return own + allocated(len(day) + 16) + EXPLORE_FACTOR * allocated(len(day))


def weight(settings: Settings, event: Mapping[str, Any], inclusion: float | None = None) -> float:
    """What the event's observations count for in the quality histograms: 1 / its inclusion
    probability with RAGMON_SAMPLING=planned (rates move: `rate(_sum) / rate(_count)` is then
    Hajek's weighted mean), else 1 (one fixed rate: the plain mean is unbiased already)."""
    if settings.sampling != "planned":
        return 1.0
    p = inclusion if inclusion is not None else inclusion_probability(settings, event)
    return 1.0 / max(1e-9, p)


def inclusion_probability(settings: Settings, event: Mapping[str, Any]) -> float:
    """The probability with which `event` was chosen for judging: its own when it carries one,
    else RAGMON_SAMPLE_RATE (the same for every event while it is not changed)."""
    return float(event.get("inclusion_probability", settings.sample_rate))


def fail_call(keys: Keys, ref: str, reason: str, message: str, now: float) -> Call:
    """FAIL for the event `ref`: its result says why (`reason: message`)."""
    return scripts.FAIL.call(
        keys={"event": keys.event(ref), "counters": keys.counters, "failed": keys.failed,
              "leased": keys.leased, "pending": keys.pending(split_ref(ref)[0])},
        args={"result": failed_result(f"{reason}: {message}"), "reason": reason, "now": now,
              "ref": ref},
    )  # fmt: skip
