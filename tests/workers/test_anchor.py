"""The anchor set's re-judging on a real Redis: a set frozen from people's grades (the same
passages every day, whatever people grade next), a baseline per judge identity, and a run the
budget stops kept as incomplete without moving the drift gauges."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from ragmon.core.anchor import drift
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store.judge_state import JudgeState
from ragmon.store.keys import utc_today
from ragmon.workers.judges.lexical import LexicalJudge
from ragmon.workers.judges.llm import OpenAIJudge
from ragmon.workers.rejudge import rejudge
from tests.support.fake_llm import FakeLLM

T0 = datetime(2026, 11, 20, 5, tzinfo=UTC)


def people(store: Store, n: int, offset: int = 0) -> None:
    """`n` people's grades with their texts, one per event (as `POST /v1/grades` keeps them)."""
    store.human.write([
        {"app": "shop", "event_id": f"e{i}", "passage_id": "p", "rank": 1, "reviewer": "ann",
         "grade": i % 4, "query": f"refund question {i}", "text": f"refund question {i} " * (i % 4),
         "at": "2026-11-20T00:00:00Z", "judge": "x/y/z", "judge_grade": i % 4}
        for i in range(offset, offset + n)
    ])  # fmt: skip


def test_people_s_grades_become_a_frozen_set_with_a_baseline(settings: Settings) -> None:
    store = Store.connect(settings)
    people(store, 20)
    empty = asyncio.run(rejudge(settings, store, LexicalJudge(), T0))
    assert empty["passages"] == 0 and "no anchor set yet" in empty["reason"]
    people(store, 20, offset=20)  # 40 now: enough
    first = asyncio.run(rejudge(settings, store, LexicalJudge(), T0))
    assert (first["passages"], first["graded"], first["source"]) == (40, 40, "people")
    people(store, 30, offset=40)  # more grades later do not change the set
    second = asyncio.run(rejudge(settings, store, LexicalJudge(), T0 + timedelta(days=1)))
    assert second["passages"] == 40
    assert second["kappa"] == first["kappa"]  # the same judge, the same passages: no drift
    latest, baseline = drift(store.anchors.runs()) or ({}, {})
    assert latest["at"] > baseline["at"] and baseline["judge"] == "lexical/lexical-1/per-event"
    store.anchors.reset()
    again = asyncio.run(rejudge(settings, store, LexicalJudge(), T0 + timedelta(days=2)))
    assert again["passages"] == 70 and len(store.anchors.runs()) == 1  # a new set and history


def test_a_run_the_budget_stops_moves_nothing(redis_url: str) -> None:
    with FakeLLM() as fake:
        env = {"REDIS_URL": redis_url, "RAGMON_JUDGE": "openai", "OPENAI_BASE_URL": fake.url,
               "OPENAI_API_KEY": "sk-test", "RAGMON_DAILY_BUDGET_USD": "0.0005"}  # fmt: skip
        s = Settings.from_env(env, dotenv=None)
        store = Store.connect(s)
        people(store, 40)
        first = asyncio.run(rejudge(s, store, OpenAIJudge(s, store), T0))
        assert first["graded"] == 40  # 40 calls of ~500 tokens: ~0.003 USD, past the budget
        assert JudgeState(store.client).spent(utc_today()) > 0.0005
        stopped = asyncio.run(rejudge(s, store, OpenAIJudge(s, store), T0 + timedelta(days=1)))
        assert stopped["graded"] < 40 and "budget_exhausted" in stopped["reason"]
        latest, _ = drift(store.anchors.runs()) or ({}, {})
        assert latest["at"] == first["at"]  # the gauges keep the last complete run
