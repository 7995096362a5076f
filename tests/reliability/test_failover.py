"""Redis behind Sentinel (issue 49): a primary, a replica and a real `redis-sentinel`. The API
finds the primary through the Sentinel, follows a failover without a restart, answers `503`
with `Retry-After` while it happens, and loses no event it acknowledged; with
RAGMON_WAIT_REPLICAS a write no replica acknowledged is `503`, kept, and a retry is a
duplicate."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from ragmon.core.wire import event_ref
from ragmon.setting_values import SettingsError
from ragmon.settings import Settings
from ragmon.store.keys import Keys
from tests.support.api_server import ApiServer
from tests.support.events import make_event
from tests.support.sentinel import SentinelFleet
from tests.support.waiting import scaled

KEYS = Keys()


@pytest.fixture
def fleet() -> Iterator[SentinelFleet]:
    f = SentinelFleet()
    yield f
    f.stop()


def post_until_accepted(client: httpx.Client, event: dict) -> list[int]:
    """POST one event, retrying a `503` (with its Retry-After) as the SDK does, with the same
    event id; every answer it got."""
    deadline = time.monotonic() + scaled(60)
    answers = []
    while True:
        r = client.post("/v1/retrievals", json=event)
        answers.append(r.status_code)
        if r.status_code != 503 or time.monotonic() > deadline:
            return answers
        assert r.headers.get("Retry-After"), r.text
        time.sleep(0.2)


@pytest.mark.slow  # real processes and a failover: out of scripts/test --quick
def test_the_api_follows_a_failover_and_loses_no_acknowledged_event(fleet: SentinelFleet) -> None:
    settings = Settings.from_env(
        {"REDIS_URL": fleet.url, "RAGMON_JUDGE": "lexical", "RAGMON_WAIT_REPLICAS": "1"},
        dotenv=None,
    )
    api = ApiServer(settings).start()
    try:
        events = [make_event(n=3, k=2, seed=i, event_id=f"fo-{i}") for i in range(40)]
        answers = []
        for i, event in enumerate(events):
            if i == 20:
                fleet.failover()
            answers.append(post_until_accepted(api.client, event))
        # each accepted: 202, or 200 for a retry whose first try was stored before its 503
        assert {a[-1] for a in answers} <= {200, 202}
        assert all(a[-1] == 202 or 503 in a for a in answers)
        # the new primary (the old replica) holds every acknowledged event, once
        new = redis.Redis(port=fleet.replica.port)
        assert new.info("replication")["role"] == "master"
        for e in events:
            assert new.exists(KEYS.event(event_ref("test", e["event_id"])))
        assert api.client.get("/v1/retrievals/fo-39", params={"app": "test"}).status_code == 200
        new.close()
    finally:
        api.stop()


@pytest.mark.slow
def test_a_write_no_replica_acknowledged_is_503_kept_and_a_retry_is_a_duplicate(
    fleet: SentinelFleet,
) -> None:
    settings = Settings.from_env(
        {"REDIS_URL": fleet.url, "RAGMON_JUDGE": "lexical", "RAGMON_WAIT_REPLICAS": "2",
         "RAGMON_WAIT_TIMEOUT_MS": "200"},
        dotenv=None,
    )  # fmt: skip
    api = ApiServer(settings).start()
    try:
        event = make_event(n=3, k=2, seed=1, event_id="unreplicated")
        r = api.client.post("/v1/retrievals", json=event)
        assert r.status_code == 503 and r.headers["Retry-After"]
        assert "RAGMON_WAIT_REPLICAS=2" in r.text and "1 of" in r.text
        primary = redis.Redis(port=fleet.primary.port)
        ref = event_ref("test", "unreplicated")
        assert primary.exists(KEYS.event(ref))  # kept
        primary.close()
        again = api.client.post("/v1/retrievals", json=event)
        assert again.status_code == 503  # still one replica: said again, stored once
        assert (
            api.client.get("/v1/retrievals/unreplicated", params={"app": "test"}).status_code == 200
        )
    finally:
        api.stop()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://127.0.0.1:26379", "name the service"),
        ("redis+sentinel://host:port/main", "host:port"),
        ("redis+sentinel://a:1/main/x", "must be a number"),
    ],
)
def test_a_bad_sentinel_url_is_one_line_naming_it(url: str, says: str) -> None:
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"REDIS_URL": url}, dotenv=None)
    assert "REDIS_URL" in str(err.value) and says in str(err.value)
    assert "\n" not in str(err.value)
