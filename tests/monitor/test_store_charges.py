"""Every writer of an app's data charges its ledger (`ragmon.store.ledger`): the second
judge's opinions, with the app's grades."""

from __future__ import annotations

import json
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
