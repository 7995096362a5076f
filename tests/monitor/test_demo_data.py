"""The demo data files and traffic: valid events, retrievers in a known order, a regression."""

from __future__ import annotations

import re
import statistics
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest

from ragmon.api.schemas import RetrievalEvent
from ragmon.core.measures import compute
from ragmon.demo.traffic import (
    DEPTH,
    REGRESSION_DAYS,
    RETRIEVERS,
    K,
    demo_events,
    load_events,
    load_golden,
    load_kb,
    load_queries,
)
from ragmon.workers.judges.lexical import lexical_grades

SEGMENTS = {"billing", "technical", "account"}
NOW = datetime(2026, 10, 20, 15, 30, tzinfo=UTC)


def lexical(event: dict) -> list[int]:
    return lexical_grades(event["query"], [p["text"] for p in event["passages"]])


def known(event: dict) -> list[int]:
    return [p["grade"] for p in event["passages"]]


def means(events: list[dict], grades_of, key: str) -> dict[str, float]:
    by_retriever: dict[str, list[float]] = defaultdict(list)
    for e in events:
        by_retriever[e["labels"]["retriever"]].append(compute(grades_of(e), e["k"])[key])
    return {r: statistics.mean(v) for r, v in by_retriever.items()}


def test_knowledge_base_and_queries() -> None:
    kb, queries = load_kb(), load_queries()
    assert 80 <= len(kb) <= 150
    assert 50 <= len(queries) <= 90
    ids = [p["id"] for p in kb]
    assert len(set(ids)) == len(ids)
    assert len({q["id"] for q in queries}) == len(queries)
    for p in kb:
        assert p["segment"] in SEGMENTS
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", p["text"].strip()) if s]
        assert 1 <= len(sentences) <= 4, p["id"]
    for q in queries:
        assert q["segment"] in SEGMENTS
        assert set(q["grades"]) <= set(ids), q["id"]
        assert set(q["grades"].values()) <= {1, 2, 3}
        assert 3 in q["grades"].values(), f"{q['id']} has no exact answer"
    assert {q["segment"] for q in queries} == SEGMENTS


def test_events_are_http_events() -> None:
    events, queries = load_events(), load_queries()
    assert len(events) == len(queries) * len(RETRIEVERS)
    assert len({e["event_id"] for e in events}) == len(events)
    for e in events:
        RetrievalEvent.model_validate(e)
        assert set(e) == {"event_id", "query", "k", "passages", "labels"}
        assert e["k"] == K and len(e["passages"]) == DEPTH
        assert all(set(p) == {"id", "text", "score"} for p in e["passages"])
        ids = [p["id"] for p in e["passages"]]
        assert len(set(ids)) == len(ids)
        scores = [p["score"] for p in e["passages"]]
        assert scores == sorted(scores, reverse=True)
        labels = e["labels"]
        assert labels["app"] == "support-bot" and labels["index"] == "kb-2026-10"
        assert labels["retriever"] in RETRIEVERS and labels["segment"] in SEGMENTS


def test_golden_is_events_plus_intended_grades() -> None:
    events, golden = load_events(), load_golden()
    texts = {p["id"]: p["text"] for p in load_kb()}
    grades_by_query = {q["query"]: q["grades"] for q in load_queries()}
    assert len(golden) == len(events)
    for e, g in zip(events, golden, strict=True):
        RetrievalEvent.model_validate(g)
        stripped = [{k: v for k, v in p.items() if k != "grade"} for p in g["passages"]]
        assert {**g, "passages": stripped} == e
        intended = grades_by_query[g["query"]]
        for p in g["passages"]:
            assert p["grade"] == intended.get(p["id"], 0)
            assert p["text"] == texts[p["id"]]


@pytest.mark.parametrize("grades_of", [known, lexical], ids=["intended", "lexical"])
@pytest.mark.parametrize("key", ["ndcg", "precision", "t", "f_e"])
def test_retriever_order(grades_of, key: str) -> None:
    m = means(load_golden(), grades_of, key)
    assert m["hybrid-v2"] > m["bm25"] > m["dense-v1"], m


def test_lexical_judge_agrees_with_intended_grades() -> None:
    """Figures quoted in docs/demo-data.md: answers look relevant, unrelated passages do not."""
    pairs = [(k, g) for e in load_golden() for k, g in zip(known(e), lexical(e), strict=True)]
    answers = [g for k, g in pairs if k == 3]
    unrelated = [g for k, g in pairs if k == 0]
    assert sum(g >= 2 for g in answers) / len(answers) >= 0.95
    assert sum(g >= 2 for g in unrelated) / len(unrelated) <= 0.02


def test_traffic_is_deterministic_for_a_seed() -> None:
    a = demo_events(days=3, per_day=20, seed=7, now=NOW)
    assert a == demo_events(days=3, per_day=20, seed=7, now=NOW)
    b = demo_events(days=3, per_day=20, seed=8, now=NOW)
    assert {e["event_id"] for e in a}.isdisjoint(e["event_id"] for e in b)
    assert [e["passages"] for e in a] != [e["passages"] for e in b]


def test_traffic_events_are_valid_and_backdated() -> None:
    now = datetime.now(UTC)
    events = demo_events(days=14, per_day=30, seed=1, now=now)
    assert len(events) == 14 * 30
    assert len({e["event_id"] for e in events}) == len(events)
    days = set()
    for e in events:
        uuid.UUID(e["event_id"])
        assert e["timestamp"].endswith("Z")
        RetrievalEvent.model_validate(e)  # at most 35 days old, not in the future
        ts = datetime.fromisoformat(e["timestamp"])
        assert ts <= now
        days.add(ts.date())
        assert "grade" not in e["passages"][0]
    assert len(days) == 14
    assert min(days) == (now - timedelta(days=13)).date()
    assert {e["labels"]["retriever"] for e in events} == set(RETRIEVERS)


def test_traffic_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="days"):
        demo_events(days=0, now=NOW)
    with pytest.raises(ValueError, match="days"):
        demo_events(days=40, now=NOW)
    with pytest.raises(ValueError, match="per_day"):
        demo_events(per_day=0, now=NOW)
    with pytest.raises(ValueError, match="timezone"):
        demo_events(now=datetime(2026, 10, 20))


@pytest.mark.parametrize("grades_of", [known, lexical], ids=["intended", "lexical"])
def test_traffic_regression_week(grades_of) -> None:
    events = demo_events(days=14, per_day=60, seed=2026, now=NOW, with_grades=True)
    first_recent_day = (NOW - timedelta(days=REGRESSION_DAYS - 1)).date()
    recent = [
        e for e in events if datetime.fromisoformat(e["timestamp"]).date() >= first_recent_day
    ]
    before = [e for e in events if datetime.fromisoformat(e["timestamp"]).date() < first_recent_day]
    assert len(recent) == len(before) == 7 * 60
    for key, drop in (("ndcg", 0.08), ("precision", 0.05)):
        now_m, then_m = means(recent, grades_of, key), means(before, grades_of, key)
        assert now_m["bm25"] < then_m["bm25"] - drop, (key, now_m, then_m)
        for stable in ("hybrid-v2", "dense-v1"):
            assert abs(now_m[stable] - then_m[stable]) < drop, (key, stable, now_m, then_m)
