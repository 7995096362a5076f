"""What one app may take of what all apps share: Redis (RAGMON_APP_STORAGE_MB) and the per-day
records the report reads. One app reaching its limit, or flooding a day, never fails or trims
another app's events (issue 33). The judge budget per app: tests/workers/test_llm_judge.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store import finish as finish_module
from tests.support.api_server import ApiServer
from tests.support.events import make_event

pytestmark = pytest.mark.process  # the API's decoding child process


def test_an_app_at_its_storage_limit_gets_507_and_the_others_are_stored(
    make_api: Callable[..., ApiServer],
) -> None:
    api = make_api(RAGMON_APP_STORAGE_MB="0.05,b=10")  # 50 KB for every app, 10 MB for b
    refused = None
    for i in range(200):  # ~1.3 KB an event: the limit within ~40 events
        ev = make_event(n=10, labels={"app": "a"}, seed=i, event_id=f"a-{i}")
        r = api.client.post("/v1/retrievals", json=ev)
        if r.status_code == 507:
            refused = (i, r)
            break
        assert r.status_code == 202, r.text
    assert refused is not None, "app a was never refused"
    i, r = refused
    assert 20 < i < 60, i
    detail = r.json()["detail"]
    assert "app 'a'" in detail and "RAGMON_APP_STORAGE_MB=0.05 MB" in detail, detail
    assert r.headers["retry-after"]
    gone = api.client.get(f"/v1/retrievals/a-{i}?app=a")
    assert gone.status_code == 404  # nothing of the refused request stored
    for j in range(60):  # b: its own, larger share
        ev = make_event(n=10, labels={"app": "b"}, seed=j, event_id=f"b-{j}")
        r = api.client.post("/v1/retrievals", json=ev)
        assert r.status_code == 202, r.text
    batch = [make_event(n=10, labels={"app": "c"}, seed=j, event_id=f"c-{j}") for j in range(3)]
    r = api.client.post("/v1/retrievals/batch", json={"events": batch})
    assert r.status_code == 202, r.text  # c: its own 50 KB, untouched by a's
    metrics = api.client.get("/metrics").text
    assert 'ragmon_events_rejected_total{reason="app_storage"} 1.0' in metrics


def test_one_apps_backdated_flood_never_trims_another_apps_day_records(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-day records (the report's worst events and clustering) are kept per app: app
    a's flood of one day past the cap keeps a's newest records and all of b's."""
    monkeypatch.setattr(finish_module, "DAY_EVENTS_KEEP", 5)
    store = Store.connect(settings)
    day = "2026-11-20"

    def finish(app: str, i: int) -> None:
        labels = {"app": app, "index": "kb", "retriever": "bm25", "segment": "all"}
        ev = make_event(n=4, k=2, labels=labels, seed=i, event_id=f"{app}-{i}")
        ev["timestamp"] = f"{day}T10:00:00+00:00"
        ev["_received_at"] = 0.0
        result = {
            "event_id": ev["event_id"], "status": "done", "k": 2, "labels": ev["labels"],
            "grades": [1, 0, 2, 3], "grade_source": ["judge"] * 4, "measures": {"ndcg": 0.5},
        }  # fmt: skip
        store.client.hset(store.keys.event(f"{app}|{ev['event_id']}"), "s", "queued")
        assert store.finish(ev, result, [1, 0, 2, 3])

    for i in range(3):
        finish("b", i)
    for i in range(40):  # a's backdated flood of the same day
        finish("a", i)
    ids = [r["id"] for r in store.day_events(day)]
    assert sorted(i for i in ids if i.startswith("b-")) == ["b-0", "b-1", "b-2"]
    assert sorted(i for i in ids if i.startswith("a-")) == [f"a-{i}" for i in range(35, 40)]
    # the report reads a small series' older weeks from its own app's lists only
    assert sorted(r["id"] for r in store.day_events(day, only={"b"})) == ["b-0", "b-1", "b-2"]
