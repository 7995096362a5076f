"""The optional second judge (RAGMON_SECOND_JUDGE_MODEL) against the fake LLM: on its sample it
grades what the first judge graded, the event keeps the first judge's grades and measures, and
the two judges' agreement is exported like people's."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragmon.workers.second import chosen
from ragmon.workers.summaries import keep_estimates
from ragmon.workers.worker import make_worker
from tests.support.api_server import ApiServer
from tests.support.fake_llm import FakeLLM

pytestmark = pytest.mark.process  # RQ work horses, the /metrics renderer

FIRST, SECOND = "gpt-4o-mini/umbrela-1/pointwise", "gpt-4o/umbrela-1/pointwise"


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def test_the_sample_is_deterministic_and_of_the_rate() -> None:
    ids = [f"event-{i}" for i in range(4000)]
    picked = [chosen(e, 0.2) for e in ids]
    assert picked == [chosen(e, 0.2) for e in ids]  # a retried job decides the same
    assert 0.17 < sum(picked) / len(ids) < 0.23
    assert not any(chosen(e, 0.0) for e in ids) and all(chosen(e, 1.0) for e in ids)


def test_second_judge_grades_beside_the_first_and_its_agreement_is_exported(
    make_api: Callable[..., ApiServer], fake: FakeLLM
) -> None:
    api = make_api(
        RAGMON_JUDGE="openai", OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="sk-test",
        RAGMON_JUDGE_MODEL="gpt-4o-mini", RAGMON_SECOND_JUDGE_MODEL="gpt-4o",
        RAGMON_SECOND_JUDGE_RATE="1", RAGMON_GROUP_WINDOW_S="0",
    )  # fmt: skip
    words = ["refund", "invoice", "login", "quota", "export", "webhook"]
    events = [
        {"event_id": f"e{i}", "query": f"{w} question {i}", "k": 2,
         "labels": {"app": "shop"},
         "passages": [{"id": "a", "text": f"{w} question {i} answered"},
                      {"id": "b", "text": f"{w} only"}, {"id": "c", "text": "other words"}]}
        for i, w in enumerate(words * 2)
    ]  # fmt: skip
    with httpx.Client(base_url=api.url, timeout=30) as c:
        for e in events:
            assert c.post("/v1/retrievals", json=e).status_code == 202
        make_worker(api.settings).work(burst=True, with_scheduler=False)
        keep_estimates(api.store)  # a worker's tick: the apps' agreement summarized
        make_worker(api.settings).work(burst=True, with_scheduler=False)
        results = [c.get(f"/v1/retrievals/{e['event_id']}", params={"app": "shop"}).json()
                   for e in events]  # fmt: skip
    models = [r.body["model"] for r in fake.chat_requests()]
    assert models.count("gpt-4o") == models.count("gpt-4o-mini") == 36  # 12 events x 3
    assert all(r["judge"] == FIRST for r in results)  # the measures are the first judge's
    records = api.store.second_opinions.records()
    assert len(records) == 12
    assert {(r["first"], r["second"]) for r in records} == {(FIRST, SECOND)}
    for r in records:  # the first judge's grades, as the event stored them, beside the second's
        stored = next(x for x in results if x["event_id"] == r["event_id"])["grades"]
        assert [f for f, _ in r["pairs"]] == stored
    text = httpx.get(f"{api.url}/metrics", timeout=120).text
    got = {(s.name, s.labels.get("bound")): s.value
           for fam in text_string_to_metric_families(text) for s in fam.samples
           if s.labels.get("judge") == SECOND and s.labels.get("reference") == FIRST}  # fmt: skip
    assert got[("ragmon_judge_agreement_pairs", None)] == 36
    assert got[("ragmon_judge_agreement_exact", "estimate")] == 1.0  # the same rule: the same
