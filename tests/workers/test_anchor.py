"""The anchor set's re-judging on a real Redis: a set grown from people's grades (every passage
kept stays, new ones join), a baseline per judge identity, a blind run exported and said (too
few passages or questions, a run the budget stops), and an over-grading judge caught at the
first run after it starts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from ragmon.core.anchor import drift
from ragmon.core.identity import JudgeIdentity
from ragmon.export import make_registry, render
from ragmon.settings import Settings
from ragmon.store import Store
from ragmon.store.fields import Kind
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


def test_people_s_grades_grow_the_set_with_a_baseline(settings: Settings) -> None:
    store = Store.connect(settings)
    people(store, 20)
    small = asyncio.run(rejudge(settings, store, LexicalJudge(), T0))
    assert (small["passages"], small["blind"]) == (20, "too_few")
    assert "30 passages from 10 questions" in small["reason"]
    people(store, 20, offset=20)  # 40 now: enough
    first = asyncio.run(rejudge(settings, store, LexicalJudge(), T0 + timedelta(hours=1)))
    assert (first["passages"], first["graded"], first["source"]) == (40, 40, "people")
    assert first["blind"] is None and first["kappa"] is not None
    people(store, 30, offset=40)  # more grades later join the set (it was frozen at 40)
    second = asyncio.run(rejudge(settings, store, LexicalJudge(), T0 + timedelta(days=1)))
    assert second["passages"] == 70
    kept = {i.key for i in store.anchors.current() or []}
    assert {f"shop|e{i}|p" for i in range(40)} <= kept  # every passage kept stays
    latest, baseline = drift(store.anchors.runs()) or ({}, {})
    assert latest["at"] == second["at"] and baseline["at"] == first["at"]
    assert baseline["judge"] == "lexical/lexical-1/per-event"
    held = store.ledger.read(time.time()).held["shop"][Kind.ANCHORS]
    assert held > 70 * 40  # the set's bytes are charged to the app its grades come from
    store.anchors.reset()
    assert store.ledger.read(time.time()).held["shop"][Kind.ANCHORS] == 0
    again = asyncio.run(rejudge(settings, store, LexicalJudge(), T0 + timedelta(days=2)))
    assert again["passages"] == 70 and len(store.anchors.runs()) == 1  # a new set and history


class Graders:
    """A judge that knows the anchor set's grades: right, or over-grading every other passage
    by two grades (`over`)."""

    def __init__(self, known: dict[str, int], over: bool = False) -> None:
        self.known, self.over = known, over
        self.model, self.per_call = "m", False
        self.identity = JudgeIdentity("m", "umbrela-1", "pointwise")

    async def grade(self, query: str, passages: Sequence[tuple[str, str]]) -> list[int]:
        out = []
        for n, (_, text) in enumerate(passages):
            g = self.known[text]
            out.append(min(3, g + 2) if self.over and (n + len(query)) % 2 else g)
        return out

    async def aclose(self) -> None:
        return None


def graded_events(store: Store, events: range) -> dict[str, int]:
    """People grade 5 passages of each event (as the review page asks: every passage)."""
    known = {}
    rows = []
    for e in events:
        for r in range(5):
            text, grade = f"event {e} passage {r} text", (e + r) % 4
            known[text] = grade
            rows.append({"app": "shop", "event_id": f"e{e}", "passage_id": f"p{r}",
                         "rank": r + 1, "reviewer": "ann", "grade": grade,
                         "query": f"question {e}", "text": text, "at": "2026-11-20T00:00:00Z",
                         "judge": "m/umbrela-1/pointwise", "judge_grade": grade})  # fmt: skip
    store.human.write(rows)
    return known


def test_a_blind_watch_is_exported_and_an_over_grading_judge_is_caught_in_one_run(
    settings: Settings,
) -> None:
    # 30 passages from 6 events: every run logged "kappa None", no metric said so, and a judge
    # that then over-graded never fired the alert.
    store = Store.connect(settings)
    now = datetime.now(UTC) - timedelta(hours=3)  # runs of the last hours: the watch is not late
    known = graded_events(store, range(6))
    blind = asyncio.run(rejudge(settings, store, Graders(known), now))
    assert (blind["passages"], blind["questions"], blind["blind"]) == (30, 6, "too_few")
    text = render(make_registry(store)).decode()
    assert 'ragmon_judge_anchor_blind{reason="too_few"} 1.0' in text
    assert 'ragmon_judge_anchor_blind{reason="late"} 0.0' in text
    assert "ragmon_judge_anchor_set_questions 6.0" in text
    known |= graded_events(store, range(6, 12))  # people grade on: the set grows
    base = asyncio.run(rejudge(settings, store, Graders(known), now + timedelta(hours=1)))
    assert (base["passages"], base["questions"], base["blind"]) == (60, 12, None)
    text = render(make_registry(store)).decode()
    assert 'ragmon_judge_anchor_blind{reason="too_few"} 0.0' in text
    over = asyncio.run(rejudge(settings, store, Graders(known, over=True),
                               now + timedelta(hours=2)))  # fmt: skip
    latest, baseline = drift(store.anchors.runs()) or ({}, {})
    assert latest["at"] == over["at"] and baseline["at"] == base["at"]
    assert latest["kappa"]["high"] < baseline["kappa"]["estimate"]  # RagmonJudgeDrift's condition


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


def test_the_cadence_is_a_setting() -> None:
    from ragmon.workers.schedule import anchor_cron

    assert anchor_cron(24) == "0 5 * * *"  # daily, before the weekly report
    assert anchor_cron(1) == "0 */1 * * *" and anchor_cron(6) == "0 */6 * * *"
