"""A keyless API answers only requests for localhost, IP addresses and RAGMON_ALLOWED_HOSTS: a
web page of another site that resolves its name to ragmon's address (DNS rebinding), or posts
to it from its own origin, is refused `403` and nothing is stored or read."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ragmon.api.hosts import HostCheck, host_of
from tests.support.api_server import ApiServer
from tests.support.events import make_event

KEY = "k" * 24


@pytest.mark.parametrize(
    ("value", "host"),
    [("127.0.0.1:8000", "127.0.0.1"), ("[::1]:8000", "::1"), ("LocalHost", "localhost"),
     ("evil.example:80", "evil.example"), ("::1", "::1")],
)  # fmt: skip
def test_host_of(value: str, host: str) -> None:
    assert host_of(value) == host


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({"host": "127.0.0.1:8000"}, None),
        ({"host": "localhost:8000", "origin": "http://localhost:8000"}, None),
        ({"host": "10.1.2.3:8000"}, None),
        ({"host": "api:8000"}, None),  # allowed by name
        ({"host": "x.corp.example"}, None),  # by domain
        ({"host": "rebind.evil.example:8000"}, "Host"),
        ({"host": "127.0.0.1:8000", "origin": "https://evil.example"}, "Origin"),
        ({"host": "127.0.0.1:8000", "origin": "null"}, "Origin"),
        ({"host": "127.0.0.1:8000", "origin": "http://127.0.0.1:8000"}, None),
    ],
)
def test_which_requests_are_refused(headers: dict[str, str], refused: str | None) -> None:
    check = HostCheck(lambda *a: None, ("api", ".corp.example"))  # type: ignore[arg-type]
    why = check.problem([(k.encode(), v.encode()) for k, v in headers.items()])
    assert (why.split()[0] if why else None) == refused


def test_a_rebinding_page_stores_and_reads_nothing(api: ApiServer) -> None:
    event = make_event(seed=1)
    foreign = {"Host": "rebind.evil.example:8000"}
    r = api.client.post("/v1/retrievals", json=event, headers=foreign)
    assert r.status_code == 403
    assert "RAGMON_ALLOWED_HOSTS" in r.json()["detail"] and "rebind.evil.example" in r.text
    r = api.client.post("/v1/retrievals", json=event, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "Origin" in r.json()["detail"]
    assert api.client.get(f"/v1/retrievals/{event['event_id']}").status_code == 404
    grade = {"grades": [{"app": "default", "event_id": event["event_id"], "passage_id": "p1-0",
                         "grade": 3, "reviewer": "eve"}]}  # fmt: skip
    assert api.client.post("/v1/grades", json=grade, headers=foreign).status_code == 403
    assert api.client.get("/v1/retrievals", headers=foreign).status_code == 403
    assert api.client.post("/v1/retrievals", json=event).status_code == 202  # its own address


def test_names_and_keys_admit_other_hosts(make_api: Callable[..., ApiServer]) -> None:
    named = make_api(RAGMON_ALLOWED_HOSTS="ragmon.internal")
    assert named.client.get("/healthz", headers={"Host": "ragmon.internal:8000"}).status_code == 200
    assert named.client.get("/healthz", headers={"Host": "other.internal"}).status_code == 403
    keyed = make_api(RAGMON_API_KEYS=KEY)  # a key is what a rebinding page cannot send
    r = keyed.client.get("/healthz", headers={"Host": "other.internal"})
    assert r.status_code == 200
