"""A new busy series' cold start through the real API, Redis, a worker and the scripted fake LLM
(issue 43), on a `SteppedClock`: beside an old series with two days of traffic, a new series
sends 100 events a second. Its first minute arrives whole (500 events every 5 s), the rest
of its first hour as a batch every 5 minutes with the traffic between them counted, as the API
would. Checked: the new series' first hour costs at most its share of the day's budget (1/24)
plus one planning interval's cap, no event is stored with probability 0, and the old series
keeps its rate.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ragmon.api.sampler import cold_cap
from ragmon.core.clock import SteppedClock
from ragmon.settings import Settings
from ragmon.store.keys import utc_today
from ragmon.workers.worker import make_worker
from tests.support.api_server import ApiServer
from tests.support.fake_llm import FakeLLM

pytestmark = pytest.mark.slow

MODEL = "gpt-4o-mini"
PER_S = 100
OLD_PER_HOUR = 360  # the old series: one event every 10 s, for two days
DAY_EVENTS = 2000  # the budget pays for this many judged events a day


def event(retriever: str, tag: str) -> dict:
    return {
        "event_id": f"e-{retriever}-{tag}",
        "query": f"how do I reset the password of account {tag}",
        "k": 2,
        "passages": [{"id": f"{tag}-p{j}", "text": f"reset password {tag} {j}"} for j in range(3)],
        "labels": {"app": "test", "retriever": retriever},
    }


def test_a_new_busy_series_cannot_burn_the_day(redis_url: str) -> None:
    with FakeLLM() as fake:
        base = {
            "REDIS_URL": redis_url, "RAGMON_JUDGE": "openai", "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": "sk-test", "RAGMON_JUDGE_MODEL": MODEL,
            "RAGMON_PRICES": f'{{"{MODEL}": [100.0, 400.0]}}', "RAGMON_GROUP_WINDOW_S": "0",
        }  # fmt: skip
        probe = Settings.from_env({**base, "RAGMON_SAMPLE_RATE": "1"}, dotenv=None)
        server = ApiServer(probe).start()
        try:  # the cost of judging one event (then the day's spend cleared)
            for i in range(3):
                server.client.post("/v1/retrievals", json=event("probe", str(i)))
            make_worker(probe).work(burst=True, with_scheduler=False)
            per_event = server.store.judge_state().spent(utc_today()) / 3
            server.store.client.delete(server.store.keys.spend(utc_today()))
        finally:
            server.stop()
        assert per_event > 0
        budget = DAY_EVENTS * per_event
        s = Settings.from_env({**base, "RAGMON_DAILY_BUDGET_USD": repr(budget)}, dotenv=None)
        assert s.sampling == "planned"  # the default
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        start = midnight.timestamp() + 12 * 3600  # noon of today (the judge's spend day)
        clock = SteppedClock(start - 48 * 3600)
        api = ApiServer(s, clock=clock).start()
        try:
            sampler, store = api.app.state.sampler, api.store
            old = "test|default|old|default"
            for h in range(48):  # the old series' two days, counted as the API counts them
                clock.now = start - (48 - h) * 3600 + 1
                store.sampling.count({old: OLD_PER_HOUR}, clock())
            clock.now = start
            old_rate = sampler.refresh(clock(), force=True).rates[old]
            spent0 = store.judge_state().spent(utc_today())
            sent = 0
            while clock.now < start + 3600:
                whole = clock.now < start + 60
                step = 5.0 if whole else 300.0
                batch = [event("new", f"{sent + i}") for i in range(500)]
                batch.append(event("old", f"{sent}"))
                r = api.client.post("/v1/retrievals/batch", json={"events": batch})
                assert r.status_code == 202, r.text
                sent += 500
                sampler.flush()
                if not whole:  # the rest of the step's traffic, counted without the events
                    store.sampling.count({"test|default|new|default": int(PER_S * step) - 500},
                                         clock())  # fmt: skip
                if sent % 2000 == 0:  # a worker now and then (the judge's spend so far)
                    make_worker(s).work(burst=True, with_scheduler=False)
                clock.advance(step)
                sampler.refresh(clock())
            make_worker(s).work(burst=True, with_scheduler=False)
            spent = store.judge_state().spent(utc_today()) - spent0
            new_rate = sampler.refresh(clock(), force=True).rates[old]
            stored = [
                api.client.get(f"/v1/retrievals/e-new-{i}", params={"app": "test"}).json()
                for i in range(0, sent, 97)
            ]
        finally:
            api.stop()
    cap = cold_cap(s, per_event)
    assert cap is not None
    allowed = budget / 24 + cap * per_event  # an hour's share, and one interval's cap
    assert spent <= allowed, (spent, allowed, budget)
    assert len(stored) > 100 and all(g["inclusion_probability"] > 0 for g in stored), stored[:2]
    assert new_rate == pytest.approx(old_rate, rel=0.25)  # the old series keeps its rate
