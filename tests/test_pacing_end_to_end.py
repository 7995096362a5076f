"""Budget pacing through the real API, Redis, a worker and the scripted fake LLM, on a compressed
UTC day (issue 35): the sampling planner reads a `SteppedClock` that the test moves an hour at a
time, so a day of traffic runs in minutes without monkeypatching `time`.

Each virtual hour: the planner makes its plan from the traffic so far and the day's spend, the
hour's events arrive (busier by day) and take their series' rate, a worker judges the chosen
ones. The budget is a quarter of what judging every event would cost. Checked: the spend never
passes the budget by more than one drain job's calls, the day's last hour is still judged at a
real rate with money left (no cliff), the money is mostly used, and each series' exported mean
is the weighted (Hajek) mean of its judged events computed from GET.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from ragmon.core.clock import SteppedClock
from ragmon.settings import Settings
from ragmon.store.keys import utc_today
from ragmon.workers.worker import make_worker
from tests.monitor.test_api_sampling import metrics
from tests.support.api_server import ApiServer
from tests.support.fake_llm import FakeLLM

pytestmark = pytest.mark.slow

MODEL = "gpt-4o-mini"
PER_HOUR = (4, 3, 3, 3, 3, 4, 6, 8, 10, 12, 12, 12, 12, 12, 12, 12, 10, 8, 8, 6, 6, 5, 5, 4)
SERIES = {"bm25": 1.0, "dense": 0.5}  # share of each hour's events (dense: half as many)
BUDGET_SHARE = 0.25


def event(retriever: str, hour: int, i: int) -> dict:
    """Four passages whose texts are the event's own (the judgment cache never serves them).
    No timestamp (the API's now): the planner counts traffic by its own clock's hour."""
    tag = f"{retriever}-{hour}-{i}"
    return {
        "event_id": f"e-{tag}",
        "query": f"how do I reset the password of account {tag}",
        "k": 2,
        "passages": [
            {"id": f"{tag}-p{j}", "text": f"{'reset password' if j == 0 else 'billing'} {tag}"}
            for j in range(4)
        ],
        "labels": {"app": "test", "retriever": retriever},
    }


def test_a_compressed_day_is_paced_to_its_budget(redis_url: str) -> None:
    with FakeLLM() as fake:
        base = {
            "REDIS_URL": redis_url,
            "RAGMON_JUDGE": "openai",
            "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": "sk-test",
            "RAGMON_JUDGE_MODEL": MODEL,
            "RAGMON_PRICES": f'{{"{MODEL}": [100.0, 400.0]}}',
            "RAGMON_GROUP_WINDOW_S": "0",
        }
        # the cost of judging one event, from one judged without sampling (spend then cleared)
        probe = Settings.from_env(base, dotenv=None)
        server = ApiServer(probe).start()
        try:
            midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
            day0 = midnight.timestamp()  # the virtual day is today: the judge keeps its spend
            # per day of the system's clock
            for i in range(3):
                server.client.post("/v1/retrievals", json=event("probe", 0, i))
            make_worker(probe).work(burst=True, with_scheduler=False)
            store = server.store
            per_event = store.judge_state().spent(utc_today()) / 3
            store.client.delete(store.keys.spend(utc_today()))
        finally:
            server.stop()
        assert per_event > 0
        total = sum(PER_HOUR) * sum(SERIES.values())
        budget = BUDGET_SHARE * total * per_event
        s = Settings.from_env(
            {**base, "RAGMON_SAMPLING": "planned", "RAGMON_DAILY_BUDGET_USD": repr(budget),
             "RAGMON_JOB_BATCH_SIZE": "8"},
            dotenv=None,
        )  # fmt: skip
        clock = SteppedClock(day0)
        api = ApiServer(s, clock=clock).start()
        try:
            sampler = api.app.state.sampler
            spent_after: list[float] = []
            sent: list[dict] = []
            for hour, n in enumerate(PER_HOUR):
                clock.now = day0 + hour * 3600 + 60
                sampler.refresh(clock(), force=True)
                batch = [
                    event(r, hour, i)
                    for r, share in SERIES.items()
                    for i in range(max(1, round(n * share)))
                ]
                r = api.client.post("/v1/retrievals/batch", json={"events": batch})
                assert r.status_code == 202, r.text
                sent += batch
                sampler.flush()
                make_worker(s).work(burst=True, with_scheduler=False)
                spent_after.append(api.store.judge_state().spent(utc_today()))
            got = {
                ev["event_id"]: api.client.get(
                    f"/v1/retrievals/{ev['event_id']}", params={"app": "test"}
                ).json()
                for ev in sent
            }
            exported = metrics(api)
        finally:
            api.stop()
    job = 8 * per_event  # one drain job's calls (RAGMON_JOB_BATCH_SIZE events in flight)
    assert max(spent_after) <= budget + job, (spent_after, budget)
    assert spent_after[-1] >= 0.6 * budget, (spent_after, budget)  # the money was used
    failed = [g for g in got.values() if g["status"] == "failed"]
    assert not failed, failed[:2]  # the budget never cut the day off: no budget_exhausted
    done = [g for g in got.values() if g["status"] == "done"]

    def hour_of(g: dict) -> int:
        return int(g["event_id"].split("-")[2])

    by_hour = [
        (h, round(spent_after[h] / budget, 2),
         sorted({round(g["inclusion_probability"], 3) for g in got.values() if hour_of(g) == h}),
         sum(1 for g in done if hour_of(g) == h))
        for h in range(24)
    ]  # fmt: skip
    # the money lasts the day: the last hour is still judged at a real rate, with money left
    assert spent_after[22] < budget and min(by_hour[23][2]) >= 0.05, by_hour
    assert sum(n for *_, n in by_hour[20:]) >= 1, by_hour  # and judged in the last hours
    rates = {g["inclusion_probability"] for g in got.values()}
    assert min(rates) < 0.6 and len(rates) > 2  # paced below 1, and re-planned as the day went
    for retriever in SERIES:
        rows = [
            (g["measures"]["ndcg"], g["inclusion_probability"])
            for g in done
            if g["labels"]["retriever"] == retriever
        ]
        w = [1 / p for _, p in rows]
        want = sum(wi * y for wi, (y, _) in zip(w, rows, strict=True)) / sum(w)
        where = (("app", "test"), ("index", "default"), ("retriever", retriever),
                 ("segment", "default"))  # fmt: skip
        mean = (
            exported[("ragmon_retrieval_ndcg_sum", where)]
            / exported[("ragmon_retrieval_ndcg_count", where)]
        )
        assert math.isclose(mean, want, rel_tol=1e-9), (retriever, mean, want)
