"""Short, empty and repeated rankings, known grades at every depth: through the real API and
workers, against a reference written from the contract (docs/api.md "Short, empty and repeated
rankings"), not from `monitor/core/measures.py`."""

from __future__ import annotations

import math
import random
import uuid

import pytest

from tests.support.stack import Stack, sample_value

pytestmark = pytest.mark.process  # the API and workers as processes

ALPHA = 0.5  # RAGMON_T_ALPHA and RAGMON_F_ALPHA defaults
RELEVANT = 2  # RAGMON_RELEVANT_GRADE default
HARM = {1}  # RAGMON_HARM_GRADES default


def reference(grades: list[int | None], k: int, dup: list[bool]) -> dict[str, float | None]:
    """The contract's measures. `grades` holds one grade per passage sent (None: no grade)."""
    m = len(grades)
    # a repeat is a wasted slot: not relevant, not harmful, out of the ideal ranking
    g = [None if d else x for x, d in zip(grades, dup, strict=True)]
    top = g[:k] + [None] * max(0, k - m)  # empty slots past M
    n_p = sum(1 for x in top if x is not None and x >= RELEVANT)
    dcg = sum((2**x - 1) / math.log2(i + 2) for i, x in enumerate(top) if x)
    ideal = sorted((x for x in g if x is not None), reverse=True)[:k]
    idcg = sum((2**x - 1) / math.log2(i + 2) for i, x in enumerate(ideal))
    first = next((i + 1 for i, x in enumerate(top) if x is not None and x >= RELEVANT), None)
    distinct = sum(1 for d in dup[:k] if not d)
    out: dict[str, float | None] = {
        "t": (1 - ALPHA) * n_p - ALPHA * (k - n_p) / k,
        "ndcg": dcg / idcg if idcg > 0 else 0.0,
        "precision": n_p / k,
        "hit": 1.0 if n_p else 0.0,
        "rr": 1 / first if first else 0.0,
        "harm": sum(1 for x in top if x in HARM) / k,
        "f_e": None,
        "k_over_np": None,
        "judged_at_k": (sum(1 for x in g[:k] if x is not None) / distinct) if distinct else None,
    }
    if m >= 2 * k:
        np_hat = sum(1 for x in g[: 2 * k] if x is not None and x >= RELEVANT)
        out["f_e"] = n_p / (ALPHA * k + (1 - ALPHA) * np_hat)
        out["k_over_np"] = k / np_hat if np_hat else None
    return out


def random_event(rng: random.Random, k: int, m: int) -> dict:
    ids = [f"d{i}" for i in range(m)]
    for i in range(1, m):  # about one passage in six repeats an earlier one
        if rng.random() < 0.17:
            ids[i] = ids[rng.randrange(i)]
    passages = []
    for i, pid in enumerate(ids):
        p: dict = {"id": pid, "text": f"passage {pid} about topic {i % 4} words {rng.random()}"}
        if rng.random() < 0.6:  # known grades at every depth, past 2K too
            p["grade"] = rng.randrange(4)
        passages.append(p)
    return {
        "event_id": str(uuid.uuid4()),
        "query": "topic words passage",
        "k": k,
        "passages": passages,
        "labels": {"app": "test", "retriever": "mixed"},
    }


@pytest.mark.slow
def test_random_rankings_match_the_contract(stack: Stack) -> None:
    rng = random.Random(12)
    events = []
    for _ in range(60):
        k = rng.randint(1, 6)
        events.append(random_event(rng, k, rng.randint(0, 2 * k + 5)))
    answers = stack.post(events)
    assert [a["status"] for a in answers] == ["queued"] * len(events)
    results = stack.wait_done([e["event_id"] for e in events])

    dup_total = 0
    for event, res in zip(events, results, strict=True):
        assert res["status"] == "done", res
        k, sent = event["k"], event["passages"]
        seen: dict[str, int] = {}
        dup = []
        for rank, p in enumerate(sent, start=1):
            dup.append(p["id"] in seen)
            assert res["passages"][rank - 1]["duplicate_of"] == seen.get(p["id"])
            seen.setdefault(p["id"], rank)
        dup_total += sum(dup)
        grades: list[int | None] = []
        for i, (p, got) in enumerate(zip(sent, res["passages"], strict=True)):
            assert got["id"] == p["id"] and got["rank"] == i + 1
            if dup[i]:
                assert got["grade"] is None and got["grade_source"] is None
                grades.append(None)
            elif "grade" in p:  # a known grade is used at any depth
                assert (got["grade"], got["grade_source"]) == (p["grade"], "known")
                grades.append(p["grade"])
            elif i < 2 * k:  # the judge grades the top 2K only
                assert got["grade_source"] in ("judge", "cache") and got["grade"] in range(4)
                grades.append(got["grade"])
            else:
                assert got["grade"] is None
                grades.append(None)
        want = reference(grades, k, dup)
        for key, value in want.items():
            have = res["measures"][key]
            assert (have is None) == (value is None), (key, have, value, event)
            if value is not None:
                assert have == pytest.approx(value, abs=1e-9), (key, have, value, event)
        assert res["judged_at_k"] == res["measures"]["judged_at_k"]
        assert res["query"] == event["query"] and res["timestamp"]

    metrics = stack.metrics()
    labels = {"app": "test", "index": "default", "retriever": "mixed", "segment": "default"}
    assert sample_value(metrics, "ragmon_passages_duplicate_total", labels) == dup_total
    empties = sum(1 for e in events if not e["passages"])
    assert empties  # the sample has empty retrievals, and each is measured
    assert sample_value(metrics, "ragmon_retrieval_ndcg_count", labels) == len(events)


def test_the_issue_examples(stack: Stack) -> None:
    """Known grades past 2K count in the ideal ranking; a repeat is not counted twice."""
    deep = {
        "event_id": "deep",
        "query": "q",
        "k": 2,
        "passages": [
            {"id": f"p{i}", "text": f"t{i}", "grade": g}
            for i, g in enumerate([2, 0, 0, 0, 3, 3, 0, 0, 0, 0])
        ],
        "labels": {"app": "test"},
    }
    repeat = {
        "event_id": "repeat",
        "query": "q",
        "k": 2,
        "passages": [
            {"id": "d1", "text": "a", "grade": 3},
            {"id": "d1", "text": "a", "grade": 3},
            {"id": "d2", "text": "b", "grade": 0},
            {"id": "d3", "text": "c", "grade": 0},
        ],
        "labels": {"app": "test"},
    }
    short = {"event_id": "short", "query": "q", "k": 5, "labels": {"app": "test"},
             "passages": [{"id": "a", "text": "a", "grade": 3}]}  # fmt: skip
    empty = {"event_id": "empty", "query": "q", "k": 3, "passages": [], "labels": {"app": "test"},
             "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
             "metadata": {"user_tier": "pro", "n": 3}}  # fmt: skip
    answers = stack.post([deep, repeat, short, empty])
    assert all(a["status"] == "queued" for a in answers)
    res = {r["event_id"]: r for r in stack.wait_done(["deep", "repeat", "short", "empty"])}
    assert res["deep"]["measures"]["ndcg"] == pytest.approx(0.2628, abs=1e-4)
    assert res["repeat"]["measures"]["precision"] == 0.5
    assert res["repeat"]["passages"][1]["duplicate_of"] == 1
    assert res["short"]["measures"]["precision"] == pytest.approx(1 / 5)
    assert res["short"]["measures"]["ndcg"] == 1.0
    e = res["empty"]
    assert e["measures"]["t"] == -ALPHA and e["measures"]["ndcg"] == 0.0
    assert e["measures"]["f_e"] is None and e["passages"] == []
    assert e["trace_id"] == empty["trace_id"] and e["metadata"] == empty["metadata"]
