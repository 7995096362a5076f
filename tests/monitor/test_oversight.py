"""Agreement and corrected estimates from people's grades, end to end on a real Redis, API and
worker: `/metrics`' `ragmon_judge_agreement_*` and `ragmon_estimate_*` gauges and
`GET /v1/estimates` agree with statistics computed here from what `GET` answers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ragmon.core.agreement import paired_agreement
from ragmon.core.window import windows
from ragmon.core.wire import event_ref
from ragmon.oversight import last_days
from ragmon.report.publish import write_report
from ragmon.store.keys import utc_today
from ragmon.workers.summaries import keep_estimates
from ragmon.workers.worker import make_worker
from tests.support.api_server import ApiServer
from tests.support.stack import ragmon_env

pytestmark = pytest.mark.process  # RQ work horses, the /metrics renderer, the CLI

ADMIN, SHOP_KEY = "admin-key-0123456789", "shop-key-0123456789"
KEYS = f"{ADMIN},{SHOP_KEY}:shop"
JUDGE = "lexical/lexical-1/per-event"
WORDS = ["refund", "invoice", "login", "quota", "export", "webhook", "billing", "token"]


def event(app: str, i: int) -> dict:
    """Six passages for K = 3 (nDCG's ideal reads all six), a distinct query per event."""
    a, b = WORDS[i % len(WORDS)], WORDS[(i * 3 + 1) % len(WORDS)]
    query = f"{a} {b} question {i}"
    texts = [f"{a} {b} question {i} answered", f"{b} only", "nothing here", f"{a} {b}",
             "unrelated words", f"question {i} {a}"]  # fmt: skip
    rot = i % len(texts)
    texts = texts[rot:] + texts[:rot]  # the answer at a different rank in each event
    return {
        "event_id": f"{app}-{i}",
        "query": query,
        "k": 3,
        "passages": [{"id": f"p{j}", "text": t} for j, t in enumerate(texts)],
        "labels": {"app": app, "index": "kb", "retriever": "bm25", "segment": "all"},
    }


def client(api: ApiServer, key: str = ADMIN) -> httpx.Client:
    return httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


@pytest.fixture
def judged(make_api: Callable[..., ApiServer]) -> tuple[ApiServer, list[dict]]:
    api = make_api(RAGMON_API_KEYS=KEYS, RAGMON_GROUP_WINDOW_S="0")
    with client(api) as c:
        for app, n in (("shop", 24), ("other", 3)):
            for i in range(n):
                assert c.post("/v1/retrievals", json=event(app, i)).status_code == 202
    make_worker(api.settings).work(burst=True, with_scheduler=False)
    keep_estimates(api.store)  # a worker's maintenance tick asks for the apps' summaries
    make_worker(api.settings).work(burst=True, with_scheduler=False)  # and a job makes them
    with client(api) as c:
        found = [c.get(f"/v1/retrievals/shop-{i}", params={"app": "shop"}).json()
                 for i in range(24)]  # fmt: skip
    assert all(f["status"] == "done" for f in found)
    return api, found


def metrics(api: ApiServer) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{api.url}/metrics", timeout=60).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def sample(values: dict, name: str, **labels: str) -> float | None:
    return values.get((name, tuple(sorted(labels.items()))))


def grade_all(api: ApiServer, found: list[dict], rule: Callable[[int, int], int]) -> list:
    """Every passage of the events graded by a person: `rule(judge grade, rank)`."""
    body = [
        {"app": "shop", "event_id": f["event_id"], "passage_id": p["id"], "reviewer": "ann",
         "grade": rule(p["grade"], p["rank"])}
        for f in found for p in f["passages"]
    ]  # fmt: skip
    with client(api, SHOP_KEY) as c:
        r = c.post("/v1/grades", json={"grades": body})
    assert r.status_code == 200, r.text
    make_worker(api.settings).work(burst=True, with_scheduler=False)  # the summary, made anew
    return body


def test_agreement_gauges_match_the_pairs_people_and_the_judge_gave(judged) -> None:
    api, found = judged
    over = lambda g, rank: min(3, g + (rank % 2))  # noqa: E731 - people grade some passages higher
    graded = found[:12]
    grade_all(api, graded, over)
    judge = [p["grade"] for f in graded for p in f["passages"]]
    people = [over(p["grade"], p["rank"]) for f in graded for p in f["passages"]]
    events = [f["event_id"] for f in graded for _ in f["passages"]]
    expected = paired_agreement(people, judge, events)
    assert expected.kappa is not None and expected.pairs == 72
    values = metrics(api)
    who = {"app": "shop", "judge": JUDGE, "reference": "human"}
    assert sample(values, "ragmon_judge_agreement_pairs", **who) == 72
    for name, interval in (("exact", expected.exact), ("quadratic_kappa", expected.kappa),
                           ("unweighted_kappa", expected.kappa_unweighted),
                           ("difference", expected.difference)):  # fmt: skip
        assert interval is not None
        for bound in ("estimate", "low", "high"):
            got = sample(values, f"ragmon_judge_agreement_{name}", **who, bound=bound)
            assert got == pytest.approx(getattr(interval, bound), abs=1e-9)
    assert sample(values, "ragmon_judge_agreement_difference", **who, bound="high") < 0  # under
    for r in range(4):
        for j in range(4):
            got = sample(values, "ragmon_judge_agreement_confusion", **who,
                         reference_grade=str(r), judge_grade=str(j))  # fmt: skip
            assert got == expected.confusion[r][j]
    assert not any(k[0].startswith("ragmon_judge_agreement") and ("app", "other") in k[1]
                   for k in values)  # fmt: skip
    # `ragmon agreement` prints the same figures
    assert expected.kappa is not None and expected.exact is not None
    out = subprocess.run(
        [sys.executable, "-m", "ragmon.cli", "agreement", "--app", "shop"],
        env=ragmon_env(api.settings.redis_url or ""), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    printed = out.stdout.replace("\\[", "[").replace("\\]", "]")  # Markdown's escapes
    k, e = expected.kappa, expected.exact
    assert f"| `shop` | `{JUDGE}` | people | 72 | 12 |" in printed
    assert f"{k.estimate:.3f} [{k.low:.3f}, {k.high:.3f}]" in printed
    assert f"{e.estimate:.3f} [{e.low:.3f}, {e.high:.3f}]" in printed
    assert "Corrected estimates" in printed


def test_corrected_estimates_beside_the_judge_only_means(judged, tmp_path) -> None:
    api, found = judged
    with client(api, SHOP_KEY) as c:
        assert c.get("/v1/estimates", params={"app": "other"}).status_code == 403
        before = c.get("/v1/estimates").json()
    (series,) = before["series"]  # the shop key reads its own app only
    assert series["labels"] == {"app": "shop", "index": "kb", "retriever": "bm25",
                                "segment": "all"}  # fmt: skip
    assert series["events"] == 24 and series["graded_events"] == 0
    for m in ("ndcg", "precision", "hit"):  # the judge-only means are the events' measures'
        mean = sum(f["measures"][m] for f in found) / len(found)
        assert series["measures"][m]["judge_only"] == pytest.approx(mean, abs=1e-9)
        assert series["measures"][m]["corrected"] is None
        assert "0 graded units" in series["measures"][m]["reason"]

    grade_all(api, found[:12], lambda g, rank: 0)  # people find nothing relevant at all
    with client(api, SHOP_KEY) as c:
        after = c.get("/v1/estimates", params={"retriever": "bm25"}).json()
    ndcg = after["series"][0]["measures"]["ndcg"]
    assert after["series"][0]["graded_events"] == 12 and ndcg["labels"] == 12
    assert ndcg["human_only"]["estimate"] == 0.0 and ndcg["corrected"] is not None
    assert ndcg["random_draw"] is True
    assert ndcg["corrected"]["high"] < ndcg["judge_only"]  # the judge's optimism corrected
    assert ndcg["human_only"]["high"] - ndcg["human_only"]["low"] >= (
        ndcg["corrected"]["high"] - ndcg["corrected"]["low"] - 1e-12
    )  # never wider than people's alone
    precision = after["series"][0]["measures"]["precision"]
    assert precision["labels"] == 36  # passage units: the graded top-3 passages of 12 events
    values = metrics(api)
    where = {**after["series"][0]["labels"], "measure": "ndcg"}
    for bound in ("estimate", "low", "high"):
        got = sample(values, "ragmon_estimate_corrected", **where, bound=bound)
        assert got == pytest.approx(ndcg["corrected"][bound], abs=1e-9)
    assert sample(values, "ragmon_estimate_judge_only", **where) == pytest.approx(
        ndcg["judge_only"], abs=1e-9
    )
    assert sample(values, "ragmon_estimate_human_labels", **where) == 12
    with client(api, SHOP_KEY) as c:
        assert c.get("/v1/estimates", params={"week": "2026-48"}).status_code == 400
        far = c.get("/v1/estimates", params={"week": "9999-W52"})  # ends in the year 10000
        assert far.status_code == 400 and "no such ISO week" in far.json()["detail"]
    # the weekly report's section: the same figures for its window
    current, baseline = windows(days=7)
    written = write_report(api.store, current, baseline, tmp_path, progress=lambda _: None)
    text = written.markdown.read_text().replace("\\[", "[").replace("\\]", "]")
    c = ndcg["corrected"]
    row = f"| `shop/kb/bm25/all` | nDCG@K | {ndcg['judge_only']:.3f} | {c['estimate']:.3f} "
    assert row + f"[{c['low']:.3f}, {c['high']:.3f}] |" in text
    assert "## The judge against people" in text and f"`{JUDGE}` | people | 72 |" in text


def test_an_app_s_estimates_and_review_page_read_no_byte_of_another_app(judged) -> None:
    # GET /v1/estimates for one app parsed every app's 7 days of per-day records, and the
    # review page recomputed agreement over every app's grades. Another app's stored bytes,
    # made unreadable here, must not matter to the shop's key.
    api, found = judged
    grade_all(api, found[:12], lambda g, rank: g)
    store, today = api.store, utc_today()
    store.client.rpush(store.keys.day_events(today, "other"), b"{not json")
    store.client.hset(store.keys.human_grades(event_ref("other", "other-0")), "x", b"{not json")
    store.client.zadd(store.keys.human_refs("other"), {event_ref("other", "other-0"): 1})
    store.client.sadd(store.keys.human_apps, "other")
    store.client.incr(store.keys.human_generation)
    with client(api, SHOP_KEY) as c:
        r = c.get("/v1/estimates")
    assert r.status_code == 200, r.text
    assert r.json()["series"][0]["graded_events"] == 12
    ui = httpx.Client(base_url=api.url, follow_redirects=False, timeout=60)
    login = ui.post("/ui/login", data={"key": SHOP_KEY, "next": "/ui"}, headers={"origin": api.url})
    assert login.status_code == 303
    page = ui.get("/ui/review/shop/shop-0")
    assert page.status_code == 200 and "id=agreement" in page.text


def test_the_api_reads_a_workers_summary_never_the_history(judged) -> None:
    """`GET /v1/estimates` answers the summary a worker made (issue 44): with every per-day
    record of the app gone, it answers the same until a worker summarizes again."""
    api, _ = judged
    store = api.store
    with client(api, SHOP_KEY) as c:
        before = c.get("/v1/estimates").json()
    assert before["summarized_at"] is not None and before["series"][0]["events"] == 24
    for day in last_days().days:
        store.client.delete(store.keys.day_events(day, "shop"))
    with client(api, SHOP_KEY) as c:
        assert c.get("/v1/estimates").json() == before  # no record was read
    store.estimates.want(["shop"])
    make_worker(api.settings).work(burst=True, with_scheduler=False)
    with client(api, SHOP_KEY) as c:
        after = c.get("/v1/estimates").json()
    assert after["series"] == [] and after["summarized_at"] >= before["summarized_at"]


def test_a_new_apps_estimates_are_summarized_as_its_first_event_is_judged(
    make_api: Callable[..., ApiServer],
) -> None:
    """No maintenance tick between: the drain asks for the summary of an app whose first judged
    event finished, and the burst worker makes it before it stops."""
    api = make_api(RAGMON_API_KEYS=KEYS)
    with client(api, SHOP_KEY) as c:
        assert c.get("/v1/estimates").json()["summarized_at"] is None
        assert c.post("/v1/retrievals", json=event("shop", 0)).status_code == 202
    make_worker(api.settings).work(burst=True, with_scheduler=False)
    with client(api, SHOP_KEY) as c:
        found = c.get("/v1/estimates").json()
    assert found["summarized_at"] is not None
    assert [s["events"] for s in found["series"]] == [1]
