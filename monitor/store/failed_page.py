"""The explorer's page of failed events (`status=failed`): read from the failed sets and the
events' own hashes, not from the index, which holds judged events only."""

from __future__ import annotations

import json
from typing import cast

import redis

from ragmon.core.search import Search, encode_cursor
from ragmon.core.wire import LABEL_KEYS, Status, alternatives, series_name, split_ref
from ragmon.store.fields import Field
from ragmon.store.index_walk import Page
from ragmon.store.keys import Keys
from ragmon.store.sealing import Sealer

FAILED_CHUNK = 50  # failed refs read at a time
FAILED_PARSE_BYTES = 4 << 20  # payload bytes a page of failed events parses at most


def failed_page(
    client: redis.Redis, keys: Keys, sealer: Sealer, search: Search, budget: int
) -> Page:
    """Failed events, newest failure first: a search of one app reads that app's failed
    set only (`Keys.app_failed`). A page parses at most `FAILED_PARSE_BYTES` of payloads
    (for their labels and time; at least one event), then stops with a cursor; an event
    whose payload alone is larger is listed with its app label only."""
    apps = alternatives(search.labels["app"]) if "app" in search.labels else None
    key = keys.app_failed(apps[0]) if apps and len(apps) == 1 else keys.failed
    hi = f"({search.after}" if search.after else "+inf"
    page = Page()
    parsed = 0
    while len(page.events) < search.limit and page.scanned < budget:
        chunk = cast(
            list[tuple[bytes, float]],
            client.zrevrangebyscore(key, hi, "-inf", start=0, num=FAILED_CHUNK, withscores=True),
        )
        if not chunk:
            return page
        refs = [r.decode() for r, _ in chunk]
        # several apps from the fleet's set: only theirs are read
        wanted = [apps is None or split_ref(r)[0] in apps for r in refs]
        with client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hmget(keys.event(ref), Field.STATUS, Field.RECEIVED)
                pipe.hstrlen(keys.event(ref), Field.PAYLOAD)
            heads = pipe.execute()
        for i, (ref, (_, score)) in enumerate(zip(refs, chunk, strict=True)):
            (status, received), size = heads[2 * i], int(heads[2 * i + 1])
            if size and parsed and parsed + size > FAILED_PARSE_BYTES:  # next page
                page.partial = True
                page.cursor = encode_cursor(search, hi[1:]) if hi != "+inf" else None
                return page
            page.scanned += 1
            hi = f"({score!r}"
            if not wanted[i] or status is None or status.decode() != Status.FAILED:
                continue
            ts = float(received or 0)
            if not (
                (search.since is None or ts >= search.since)
                and (search.until is None or ts < search.until)
            ):
                continue
            app, event_id = split_ref(ref)
            labels: dict[str, str] = {"app": app}
            timestamp = None
            if size <= FAILED_PARSE_BYTES:
                raw = client.hget(keys.event(ref), Field.PAYLOAD)
                parsed += size
                if raw is not None:
                    ev = json.loads(sealer.open(cast(bytes, raw)))
                    labels, timestamp = ev["labels"], ev.get("timestamp")
            if len(labels) < len(LABEL_KEYS):
                if set(search.labels) - {"app"}:
                    continue  # its other labels were not read: no match to claim
            elif not search.series_matches(series_name(labels)):
                continue
            page.events.append(
                {"event_id": event_id, "status": Status.FAILED, "labels": labels,
                 "timestamp": timestamp}
            )  # fmt: skip
            if len(page.events) == search.limit:
                page.cursor = encode_cursor(search, repr(score))
                return page
        if len(chunk) < FAILED_CHUNK:
            return page
    page.partial = True
    page.cursor = encode_cursor(search, hi[1:])
    return page
