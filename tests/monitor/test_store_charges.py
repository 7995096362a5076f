"""Every writer of an app's data charges its ledger (`ragmon.store.ledger`): the anchor set
(from people's grades, per app, given back on reset) and the second judge's opinions."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ragmon.core.anchor import AnchorItem
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


def test_the_anchor_set_is_charged_to_the_apps_it_came_from(store: Store) -> None:
    items = [
        AnchorItem("shop|e1|p1", "q", "t" * 1000, 2),
        AnchorItem("shop|e2|p1", "q", "t" * 1000, 1),
        AnchorItem("wiki|e9|p3", "q", "t" * 100, 3),
        AnchorItem("golden.jsonl:3:1", "q", "t" * 5000, 0),  # the operator's file: no app
    ]
    store.anchors.freeze(items, now=NOW)
    charged = held(store, Kind.ANCHORS)
    assert set(charged) == {"shop", "wiki"}
    assert 2000 < charged["shop"] < 2600 and 100 < charged["wiki"] < 400
    store.anchors.freeze(items[:1], now=NOW)  # a set is frozen already: nothing kept, charged
    assert held(store, Kind.ANCHORS) == charged
    store.anchors.reset(now=NOW)
    assert all(n == 0 for n in held(store, Kind.ANCHORS).values())


def test_a_second_opinion_is_charged_with_the_apps_grades(store: Store) -> None:
    record = {"app": "shop", "event_id": "e1", "first": "j1", "second": "j2",
              "pairs": [[2, 3]] * 20}  # fmt: skip
    store.second_opinions.add(record, now=NOW)
    text = json.dumps(record, separators=(",", ":"))
    assert len(text) <= held(store, Kind.GRADES)["shop"] < 2 * len(text)
