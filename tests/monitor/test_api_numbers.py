"""Numbers an app sends are finite and bounded before anything shared runs: a hostile score
fails only its own request (`422` naming the field), never the micro-batch another app's
events share, nor the signals' sums (an OverflowError, a sum at +Inf)."""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from ragmon.core.signals import extract
from ragmon.core.wire import MAX_SCORE
from tests.support.api_server import ApiServer
from tests.support.events import make_event

HOSTILE = ["1.4e154", "1e308", "-1e308", "NaN", "Infinity", "-Infinity", "1e13"]


def body(event: dict, score: str) -> bytes:
    """`event` with its first passage's score written as `score` (JSON allows no NaN: sent as
    the literal a careless encoder writes)."""
    event["passages"][0]["score"] = 0.5
    text = json.dumps(event)
    return text.replace('"score": 0.5', f'"score": {score}', 1).encode()


@pytest.mark.parametrize("score", HOSTILE)
def test_a_hostile_score_fails_its_own_request_naming_the_field(api: ApiServer, score: str) -> None:
    event = make_event(seed=3, labels={"app": "appA"})
    r = api.client.post(
        "/v1/retrievals", content=body(event, score), headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "passages", 0, "score"]
    assert api.client.get(f"/v1/retrievals/{event['event_id']}?app=appA").status_code == 404


def test_a_score_at_the_bound_is_stored_and_its_sums_stay_finite(api: ApiServer) -> None:
    event = make_event(seed=4, n=2, k=2, labels={"app": "appA"})
    event["passages"][0]["score"], event["passages"][1]["score"] = MAX_SCORE, -MAX_SCORE
    assert api.client.post("/v1/retrievals", json=event).status_code == 202
    store = api.store
    sums = {
        k.decode(): float(v)
        for k, v in store.client.hgetall(store.keys.hist).items()
        if k.startswith(b"signal_") and k.endswith((b"|sum", b"|sumsq"))
    }
    assert sums and all(math.isfinite(v) for v in sums.values())


def test_one_apps_hostile_numbers_never_fail_anothers_writes(api: ApiServer) -> None:
    """appA's scores of 1.4e154 beside appB's ordinary events in the same micro-batches: each
    appA request answers 422, every appB request 202."""

    def post(i: int) -> tuple[str, int]:
        if i % 5 == 0:
            event = make_event(seed=100 + i, labels={"app": "appA"})
            r = api.client.post("/v1/retrievals", content=body(event, "1.4e154"),
                                headers={"content-type": "application/json"})  # fmt: skip
            return "appA", r.status_code
        event = make_event(seed=100 + i, labels={"app": "appB"})
        return "appB", api.client.post("/v1/retrievals", json=event).status_code

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(post, range(50)))
    assert {code for app, code in answers if app == "appA"} == {422}
    assert {code for app, code in answers if app == "appB"} == {202}


@pytest.mark.parametrize(
    "scores",
    [[1e308, 1e308], [1.4e154, -1.4e154, 3.0], [1e15, -1e15, 1.5e-323], [math.nan, 1.0]],
)
def test_signals_of_extreme_scores_are_finite_or_absent(scores: list[float]) -> None:
    values = extract("q", 3, [f"p{i}" for i in range(len(scores))], scores).values
    for key in ("top_score", "score_gap", "qpp_nqc", "qpp_wig"):
        v = values[key]
        assert v is None or math.isfinite(v), (key, v)
