"""The API with its Redis gone: every route that needs Redis answers 503 with Retry-After (GET
was a bare 500), and the log holds one line per kind every few seconds, never a traceback per
request."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from ragmon.settings import Settings
from tests.support.api_server import ApiServer
from tests.support.events import make_event
from tests.support.stack import RedisServer

pytestmark = pytest.mark.process  # a Redis of its own, stopped under the API


@pytest.fixture
def api_without_redis() -> Iterator[ApiServer]:
    server = RedisServer().start()
    settings = Settings.from_env({"REDIS_URL": server.url, "RAGMON_JUDGE": "lexical"}, dotenv=None)
    api = ApiServer(settings).start()
    server.cleanup()  # Redis goes away after the API started
    yield api
    api.stop()


def test_redis_down_is_503_and_one_log_line_per_kind(
    api_without_redis: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    api = api_without_redis
    caplog.set_level(logging.WARNING)
    for i in range(10):
        r = api.client.get(f"/v1/retrievals/e{i}")
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] and "unavailable" in r.json()["detail"]
        r = api.client.post("/v1/retrievals", json=make_event(seed=i))
        assert r.status_code == 503, r.text
    assert api.client.get("/readyz").status_code == 503
    assert api.client.get("/healthz").status_code == 200
    lines = [r for r in caplog.records if r.name.startswith("ragmon")]
    kinds = sorted(r.getMessage().split(" (")[0].split(":")[0] for r in lines)
    assert kinds == ["could not record counts", "event store unavailable, answering 503"], kinds
    # 20 requests, two kinds: one line each
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in lines)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]  # no "Exception in ASGI application"


def test_readyz_the_pages_and_metrics_say_what_to_check_not_where(
    api_without_redis: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """`/readyz` is open to anyone and pages reach browsers: they name the setting to check,
    never Redis' address or the exception's text (before: "Error 111 connecting to
    127.0.0.1:PORT. Connection refused."); the log has both."""
    api = api_without_redis
    caplog.set_level(logging.WARNING)
    address = urlsplit(api.settings.redis_url or "").netloc
    answers = {
        "/readyz": api.client.get("/readyz"),
        "/ui/events": api.client.get("/ui/events"),
        "/ui/events/shop/e1": api.client.get("/ui/events/shop/e1"),
        "/metrics": api.client.get("/metrics"),
        "/v1/retrievals": api.client.get("/v1/retrievals"),
    }
    for path, r in answers.items():
        assert r.status_code == 503, (path, r.text)
        assert "cannot connect to Redis (REDIS_URL)" in r.text, (path, r.text)
        for leak in (address, str(api.settings.redis_url), "Error ", "refused", "Traceback"):
            assert leak not in r.text, (path, leak, r.text)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert address in logged  # the details are in the log
