"""The drift report end to end: synthetic weeks with known grades through the real API and a
real worker on a real Redis; then the analysis alone over many seeds (false alarms)."""

from __future__ import annotations

import http.server
import json
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import uvicorn
from cryptography.fernet import Fernet

from ragmon.api import create_app
from ragmon.core.measures import BUCKETS, HISTOGRAM_MEASURES, MeasureParams, compute
from ragmon.core.window import Window, windows
from ragmon.report.analyze import analyze
from ragmon.report.document import to_markdown
from ragmon.report.gather import Dataset, WindowData
from ragmon.report.publish import run_report, write_report
from ragmon.settings import Settings
from ragmon.store import Histogram, Store, bucket_index
from ragmon.workers.worker import make_worker
from tests.support.stack import free_port
from tests.support.waiting import scaled

POOL = (3, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0)  # candidate grades per query; 10 are sent, K = 5
K = 5
GOOD, BAD = 1.0, 1.5  # ranking noise: mean nDCG@5 ≈ 0.84 and ≈ 0.73 (a drop of ~0.1)
APP, INDEX = "shop", "kb-1"


def ranked_grades(rng: random.Random, noise: float) -> list[int]:
    """A noisy ranker of the pool: score = grade + noise * N(0, 1), best first, top 10."""
    return sorted(POOL, key=lambda g: -(g + rng.gauss(0, noise)))[: 2 * K]


def synthetic_events(
    seed: int, plan: dict[str, tuple[float, float]], end: date, per_day: int, days: int = 14
) -> list[dict]:
    """`days` days ending on `end`; retriever → (noise in the first half, in the second)."""
    rng = random.Random(seed)
    out = []
    for d in range(days):
        day = end - timedelta(days=days - 1 - d)
        second = d >= days // 2
        for retriever, noises in plan.items():
            for i in range(per_day):
                grades = ranked_grades(rng, noises[second])
                ts = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(
                    seconds=rng.randrange(86_000)
                )
                qid = f"q{rng.randrange(10**6)}"
                out.append(
                    {
                        "event_id": str(uuid.uuid4()),
                        "query": f"question {qid} about {retriever} number {i}",
                        "k": K,
                        "passages": [
                            {"id": f"{qid}-p{j}", "text": f"passage {j} of {qid}", "grade": g}
                            for j, g in enumerate(grades)
                        ],
                        "labels": {
                            "app": APP,
                            "index": INDEX,
                            "retriever": retriever,
                            "segment": "faq" if i % 2 else "howto",
                        },
                        "timestamp": ts.isoformat().replace("+00:00", "Z"),
                    }
                )
    return out


class Live:
    """The API in a thread on a free port, plus a way to drain the queue with a real worker."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(
                create_app(settings), host="127.0.0.1", port=self.port, log_level="warning"
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def send(self, events: list[dict]) -> None:
        with httpx.Client(base_url=self.base, timeout=60) as client:
            for i in range(0, len(events), 500):
                r = client.post("/v1/retrievals/batch", json={"events": events[i : i + 500]})
                assert r.status_code in (200, 202), r.text

    def process(self) -> None:
        make_worker(self.settings).work(burst=True, with_scheduler=False)


def start_live(settings: Settings) -> Iterator[Live]:
    live = Live(replace(settings, job_batch_size=500))
    live.thread.start()
    deadline = time.monotonic() + scaled(20)
    while not live.server.started:
        assert time.monotonic() < deadline, "API did not start"
        time.sleep(0.05)
    yield live
    live.server.should_exit = True
    live.thread.join(10)


@pytest.fixture
def live(settings: Settings) -> Iterator[Live]:
    yield from start_live(settings)


def yesterday() -> date:
    return datetime.now(UTC).date() - timedelta(days=1)


PLAN = {
    "bm25": (GOOD, BAD),
    "stable-a": (GOOD, GOOD),
    "stable-b": (1.2, 1.2),
    "stable-c": (GOOD, GOOD),
}


@pytest.mark.slow
def test_regression_ranked_first_and_stable_not_flagged(live: Live, tmp_path: Path) -> None:
    end = yesterday()
    live.send(synthetic_events(seed=7, plan=PLAN, end=end, per_day=30))
    live.process()
    out = tmp_path / "reports"
    # the report `run_report` writes (the command's exit codes: the tests below), built once
    store = Store.connect(live.settings)
    cur, base = windows(end=end.isoformat(), days=7)
    report = write_report(store, cur, base, out, live.settings.report_keep).report
    assert report.events_cur == report.events_base == 4 * 30 * 7
    assert [r.group[2] for r in report.regressions] == ["bm25"], "only bm25 is flagged"
    top = report.regressions[0]
    assert top.severity in ("major", "moderate")
    ndcg = next(r for r in report.rows if r.group[2] == "bm25" and r.measure == "ndcg")
    assert ndcg.status == "regression"
    assert -0.16 < ndcg.change.estimate < -0.06
    assert ndcg.change.high < 0 and ndcg.p_adj < 0.001
    assert ndcg.psi >= 0.1 and ndcg.psi_reading != "within noise"
    assert ndcg.source == "per-event records"
    # every event's query was distinct: each is its own cluster
    assert ndcg.cur.clusters == ndcg.cur.n == 210
    for r in report.rows:
        if r.group[2].startswith("stable"):
            assert r.status != "regression", (r.group, r.measure, r.diff, r.p_adj)

    md = (out / "report.md").read_text()
    verdicts = md[md.index("## Verdict per retriever") : md.index("## Biggest regressions")]
    assert "| shop/kb-1/bm25 | regression |" in verdicts
    assert "| shop/kb-1/stable-a | unchanged |" in verdicts
    first_screen = md[: md.index("## Plots")]
    regressions = md[md.index("## Biggest regressions") : md.index("## Plots")]
    assert "shop/kb-1/bm25" in regressions and "stable-a" not in regressions
    assert "evidence" in first_screen and "look at first" in first_screen
    assert "real" not in first_screen  # no wording that reads p as "the change is real"
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 2
    assert (out / f"report-{cur.label.replace('..', '_')}.html").exists()
    # worst events carry the query and passage text (retention on) and passage ids
    worst = report.worst_ndcg[0]
    assert worst["m"]["ndcg"] == min(
        e["m"]["ndcg"] for e in store_events(store, cur) if e["m"]["ndcg"] is not None
    )
    assert "question q" in md and f"{worst['pids'][0]}:" in md
    assert "/ui/events/" not in md  # no RAGMON_EXPLORER_URL: ids without links
    # volume, K and grades are reported per retriever
    ops = {o.group[2]: o for o in report.ops}
    assert ops["bm25"].cur.events == 210 and ops["bm25"].cur.k_mean == K
    assert sum(ops["bm25"].cur.grades) == 210 * 2 * K
    assert report.judge_cur.cost_usd is None  # known grades: the judge never ran
    assert report.judge_cur.known_only and "every grade was sent by the app" in md
    assert "100% sent by the app (known)" in md


def store_events(store: Store, window: Window) -> list[dict]:
    return [e for day in window.days for e in store.day_events(day)]


@pytest.mark.slow
def test_text_not_retained_is_said(redis_url: str, tmp_path: Path) -> None:
    s = Settings.from_env(
        {
            "REDIS_URL": redis_url,
            "RAGMON_JUDGE": "lexical",
            "RAGMON_SAMPLING": "fixed",
            "RAGMON_STORE_TEXT": "false",
            "RAGMON_TEXT_KEYS": Fernet.generate_key().decode(),
            "RAGMON_EXPLORER_URL": "https://ragmon.example.com/",
        },
        dotenv=None,
    )
    for live in start_live(s):
        end = yesterday()
        live.send(synthetic_events(seed=3, plan={"bm25": (GOOD, GOOD)}, end=end, per_day=3))
        live.process()
        assert run_report(live.settings, tmp_path, end=end.isoformat()) == 0
    md = (tmp_path / "report.md").read_text()
    assert "RAGMON_STORE_TEXT=false" in md
    assert "not retained (hash only)" in md and "question q" not in md
    # RAGMON_EXPLORER_URL: each worst event links to its page in the explorer
    worst = md[md.index("Lowest nDCG@K") :]
    assert "](<https://ragmon.example.com/ui/events/shop/" in worst
    html = (tmp_path / "report.html").read_text()
    assert '<a href="https://ragmon.example.com/ui/events/shop/' in html


class _Hook(http.server.BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        n = int(self.headers["Content-Length"])
        _Hook.bodies.append(json.loads(self.rfile.read(n)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
def test_keeps_last_n_and_posts_webhook(live: Live, tmp_path: Path) -> None:
    end = yesterday()
    live.send(synthetic_events(seed=5, plan={"bm25": (GOOD, BAD)}, end=end, per_day=25))
    live.process()
    hook = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    _Hook.bodies.clear()
    s = replace(
        live.settings,
        report_keep=2,
        report_webhook=f"http://127.0.0.1:{hook.server_address[1]}/hook",
    )
    # a user's own files that happen to look like reports are never touched
    theirs = [tmp_path / "report-final.html", tmp_path / "report-q3.md"]
    for p in theirs:
        p.write_text("mine")
        os.utime(p, (0, 0))  # older than any report
    try:
        for back in (2, 1, 0):
            assert run_report(s, tmp_path, end=(end - timedelta(days=back)).isoformat()) == 0
            time.sleep(0.05)  # distinct modification times
    finally:
        hook.shutdown()
    assert all(p.read_text() == "mine" for p in theirs)
    for p in theirs:
        p.unlink()
    dated = {p.name for p in tmp_path.glob("report-*.html")}
    assert len(dated) == 2 and len(list(tmp_path.glob("report-*.md"))) == 2
    # the newest two runs are kept (their label is `START_END`, or `YYYY-Www` for an ISO week)
    labels = [windows(end=(end - timedelta(days=b)).isoformat())[0].label for b in (1, 0)]
    assert dated == {f"report-{lb.replace('..', '_')}.html" for lb in labels}
    assert len(_Hook.bodies) == 3
    text = _Hook.bodies[-1]["text"]
    assert "1 regression" in text and "bm25" in text and "Full report:" in text


def test_bad_window_arguments_exit_2(settings: Settings, tmp_path: Path) -> None:
    assert run_report(settings, tmp_path, week="2026-W99") == 2
    assert run_report(settings, tmp_path, end="2026-11-22", baseline="last") == 2
    assert run_report(settings, tmp_path, days=0) == 2


def test_windows() -> None:
    cur, base = windows(week="2026-W47")
    assert (cur.start, cur.end, cur.label) == (date(2026, 11, 16), date(2026, 11, 22), "2026-W47")
    assert (base.start, base.end, base.label) == (date(2026, 11, 9), date(2026, 11, 15), "2026-W46")
    cur, base = windows(end="2026-11-20", days=3, baseline="2026-10-01..2026-10-31")
    assert cur.days == ["2026-11-18", "2026-11-19", "2026-11-20"]
    assert len(base.days) == 31 and cur.label == "2026-11-18..2026-11-20"


# ---- the analysis alone: the false-alarm rate over many seeds ---------------------------------

PARAMS = MeasureParams()


def window_data(window: Window, events: list[tuple]) -> WindowData:
    """What the store would hold for (retriever, grades[, segment]) events: histograms, records."""
    acc: dict[str, dict[tuple[str, ...], list]] = {}
    records = []
    for i, (retriever, grades, *segment) in enumerate(events):
        m = compute(grades, K, PARAMS)
        labels = (APP, INDEX, retriever, segment[0] if segment else "default")
        for name in HISTOGRAM_MEASURES:
            if m[name] is None:
                continue
            h = acc.setdefault(f"retrieval_{name}", {}).setdefault(
                labels, [[0] * (len(BUCKETS[name]) + 1), 0.0, 0]
            )
            h[0][bucket_index(BUCKETS[name], m[name])] += 1
            h[1] += m[name]
            h[2] += 1
        records.append(
            {
                "id": f"{retriever}-{i}",
                "q": f"{retriever}-query-{i}",
                "ts": window.start.isoformat(),
                "labels": dict(zip(("app", "index", "retriever", "segment"), labels, strict=True)),
                "k": K,
                "m": {n: m[n] for n in HISTOGRAM_MEASURES},
                "pids": [],
                "grades": grades[:K],
            }
        )
    hists = {n: {lb: Histogram(*v) for lb, v in s.items()} for n, s in acc.items()}
    data = WindowData(window, hists, {}, days_with_data=len(window.days))
    data.add_records(records)
    return data


@pytest.mark.slow  # a report per seed
def test_no_false_alarms_over_seeds() -> None:
    """Three stable retrievers per report, 40 reports: at most 1 flagged report (rate ~1%)."""
    cur, base = windows(end="2026-11-22", days=7)
    flagged = 0
    for seed in range(40):
        rng = random.Random(seed)

        def week(rng: random.Random = rng) -> list[tuple[str, list[int]]]:
            return [
                (r, ranked_grades(rng, noise))
                for r, noise in (("a", GOOD), ("b", 1.2), ("c", 1.6))
                for _ in range(200)
            ]

        data = Dataset(window_data(cur, week()), window_data(base, week()), [], True, 35.0)
        flagged += bool(analyze(data).regressions)
    assert flagged <= 1, f"{flagged} of 40 stable reports flagged a regression"


@pytest.mark.slow  # a report per seed
def test_detects_the_drop_over_seeds() -> None:
    """The 0.1 nDCG drop at 200 events a week is found, at the top, in every seed."""
    cur, base = windows(end="2026-11-22", days=7)
    for seed in range(10):
        rng = random.Random(100 + seed)
        b = [(r, ranked_grades(rng, GOOD)) for r in ("bm25", "dense") for _ in range(200)]
        c = [
            (r, ranked_grades(rng, BAD if r == "bm25" else GOOD))
            for r in ("bm25", "dense")
            for _ in range(200)
        ]
        report = analyze(Dataset(window_data(cur, c), window_data(base, b), [], True, 35.0))
        assert report.regressions and report.regressions[0].group[2] == "bm25", seed
        assert report.regressions[0].severity in ("major", "moderate")


# ---- the weekly schedule (RQ cron in the worker process) ------------------------------------


@pytest.mark.slow
def test_weekly_schedule_registers_cron_and_job_writes_report(live: Live, tmp_path: Path) -> None:
    from rq.cron import CronScheduler

    from ragmon.workers.schedule import (
        ANCHOR_CRON,
        ANCHOR_JOB_NAME,
        JOB_NAME,
        REPORT_CRON,
        register_schedule,
    )

    end = yesterday()
    live.send(synthetic_events(seed=9, plan={"bm25": (GOOD, BAD)}, end=end, per_day=20))
    live.process()
    s = replace(live.settings, report_dir=str(tmp_path / "weekly"))
    worker = make_worker(s)
    schedule = register_schedule(worker, s)
    try:
        deadline = time.monotonic() + scaled(10)
        while not CronScheduler.all(worker.connection):
            assert time.monotonic() < deadline, "the cron scheduler never registered"
            time.sleep(0.05)
        jobs = {j.name: j for j in schedule.scheduler.get_jobs()}
        assert set(jobs) == {JOB_NAME, ANCHOR_JOB_NAME}
        anchor = jobs[ANCHOR_JOB_NAME]  # every day 05:00 (docs/agreement.md)
        assert (anchor.cron, anchor.queue_name) == (ANCHOR_CRON, s.queue_name)
        cron_job = jobs[JOB_NAME]
        assert (cron_job.name, cron_job.cron, cron_job.queue_name) == (
            JOB_NAME,
            REPORT_CRON,
            s.queue_name,
        )
        nxt = cron_job.next_enqueue_time.astimezone()
        assert nxt.weekday() == 0 and (nxt.hour, nxt.minute) == (6, 0)
        assert nxt > datetime.now(UTC)
        job = cron_job.enqueue(worker.connection)  # what the loop does when Monday 06:00 comes
    finally:
        schedule.stop()
    assert not schedule.thread.is_alive()
    worker.work(burst=True, with_scheduler=False)
    job.refresh()
    assert job.is_finished, job.latest_result()
    cur, _ = windows(end=end.isoformat(), days=7)
    dated = tmp_path / "weekly" / f"report-{cur.label.replace('..', '_')}.html"
    assert job.return_value() == str(dated) and dated.exists()
    assert "bm25" in (tmp_path / "weekly" / "report.md").read_text()


def test_hint_names_the_segment_that_collapsed() -> None:
    """Aggregates hide which query class broke: the first hint names it."""
    rng = random.Random(21)
    cur, base = windows(end="2026-11-22", days=7)
    segs = ("billing", "howto", "faq")

    def week(noise_billing: float) -> list[tuple]:
        return [
            ("bm25", ranked_grades(rng, noise_billing if s == "billing" else GOOD), s)
            for s in segs
            for _ in range(150)
        ]

    report = analyze(
        Dataset(window_data(cur, week(3.0)), window_data(base, week(GOOD)), [], True, 35.0)
    )
    (reg,) = report.regressions
    assert reg.look_first[0].startswith("segment `billing` carries most of it")


@pytest.mark.slow  # the whole report pipeline, plots included
def test_report_of_an_empty_store_says_so(settings: Settings, tmp_path: Path) -> None:
    assert run_report(settings, tmp_path, week="2026-W47") == 0
    md = (tmp_path / "report.md").read_text()
    assert "No baseline yet" in md and "no data in the current window 2026-W47" in md
    assert (tmp_path / "report-2026-W47.html").exists()


def test_first_week_says_no_baseline_yet() -> None:
    """Data this week, none before: every row reads "no baseline yet", never "no data"."""
    rng = random.Random(8)
    cur, base = windows(end="2026-11-22", days=7)
    c = window_data(cur, [("bm25", ranked_grades(rng, GOOD)) for _ in range(100)])
    report = analyze(Dataset(c, WindowData(base), [], True, 35.0))
    assert report.first_week and not report.regressions
    assert {r.status for r in report.rows} == {"no baseline yet"}
    ndcg = next(r for r in report.rows if r.measure == "ndcg")
    assert ndcg.cur is not None and ndcg.cur.n == 100  # this week's figures are still shown
    assert any(n.startswith("no baseline yet") for n in report.notes)
    from ragmon.report.analyze import summary_line
    from ragmon.report.render import build

    assert "no baseline yet" in summary_line(report)
    md = to_markdown(build(report, {}))
    assert "No baseline yet" in md and "| no data |" not in md


def test_binned_counts_when_per_event_records_are_missing() -> None:
    """Past the per-day record cap only histograms remain: binned intervals, no KS, a note."""
    rng = random.Random(5)
    cur, base = windows(end="2026-11-22", days=7)
    b = window_data(base, [("bm25", ranked_grades(rng, GOOD)) for _ in range(300)])
    c = window_data(cur, [("bm25", ranked_grades(rng, BAD)) for _ in range(300)])
    exact = {r.measure: r for r in analyze(Dataset(c, b, [], True, 35.0)).rows}
    b.events, c.events = {}, {}
    report = analyze(Dataset(c, b, [], True, 35.0))
    ndcg = next(r for r in report.rows if r.measure == "ndcg")
    assert ndcg.source == "binned counts"
    assert ndcg.cur.estimate == pytest.approx(exact["ndcg"].cur.estimate)  # sum/count is exact
    width, exact_width = (
        ndcg.cur.high - ndcg.cur.low,
        exact["ndcg"].cur.high - exact["ndcg"].cur.low,
    )
    assert width == pytest.approx(exact_width, rel=0.15)  # spread from bin mid-points
    assert report.regressions and report.regressions[0].headline.measure in exact
    assert any("binned counts" in n for n in report.notes)


def test_query_population_shift_is_said_without_segments() -> None:
    """No segments: a week of longer questions, most of them repeats, is named as a change of
    the questions (a hint), not as a regression."""
    rng = random.Random(12)
    cur, base = windows(end="2026-11-22", days=7)

    def week(window: Window, words: int, distinct: int) -> WindowData:
        data = window_data(window, [("bm25", ranked_grades(rng, GOOD)) for _ in range(300)])
        fresh = WindowData(window, data.hists, data.counters, days_with_data=7)
        records = []
        for i, e in enumerate(store_records(data)):
            records.append({**e, "q": f"q{i % distinct}", "ql": words + i % 3})
        fresh.add_records(records)
        return fresh

    report = analyze(Dataset(week(cur, 14, 60), week(base, 6, 300), [], True, 35.0))
    (pop,) = report.population
    assert pop.repeat_base == 0.0 and pop.repeat_cur == pytest.approx(0.8)
    assert pop.length_base == pytest.approx(7.0) and pop.length_cur == pytest.approx(15.0)
    assert len(pop.moved) == 2 and "repeated questions 0% → 80%" in pop.moved[0]
    assert not report.mix  # one segment: no mix table


def test_no_mix_shift_is_named_for_too_few_events() -> None:
    """A retriever with too few events to tell gets no verdict, and no mix-shift line either:
    its segment shares are shown, but 20 events moving from `howto` to `billing` are not
    called a shift of the traffic."""
    rng = random.Random(14)
    cur, base = windows(end="2026-11-22", days=7)

    def week(window: Window, billing: int) -> WindowData:
        return window_data(
            window,
            [("bm25", ranked_grades(rng, GOOD), "billing" if i < billing else "howto")
             for i in range(20)],
        )  # fmt: skip

    report = analyze(Dataset(week(cur, 18), week(base, 2), [], True, 35.0))
    assert report.too_few == [(APP, INDEX, "bm25")]
    (mix,) = report.mix
    assert [round(c - b, 1) for _, b, c in mix.shares] == [0.8, -0.8]  # shares still shown
    assert not report.mix_shifts and not mix.moved
    from ragmon.report.analyze import summary_line

    assert "segment mix moved" not in summary_line(report)


def store_records(data: WindowData) -> list[dict]:
    """The per-event records a `window_data` was built from, rebuilt from its columns."""
    out = []
    for group, ev in data.events.items():
        for i in range(len(ev)):
            out.append(
                {
                    "id": f"{group[2]}-{i}",
                    "ts": data.window.start.isoformat(),
                    "labels": dict(zip(("app", "index", "retriever"), group, strict=True))
                    | {"segment": ev.segments[i]},
                    "k": K,
                    "m": {m: (None if v[i] != v[i] else v[i]) for m, v in ev.values.items()},
                    "pids": [],
                    "grades": [],
                }
            )
    return out


@pytest.mark.process
def test_a_change_of_judge_identity_is_marked(live: Live, tmp_path: Path) -> None:
    """The baseline judged by the lexical judge, this week by an LLM (the fake server): the
    report says the identity changed, naming both, and never mixes their grades."""
    from tests.support.fake_llm import FakeLLM

    end = yesterday()
    events = synthetic_events(seed=5, plan={"bm25": (GOOD, GOOD)}, end=end, per_day=3)
    for e in events:  # judged, not known
        e["passages"] = [{k: v for k, v in p.items() if k != "grade"} for p in e["passages"]]
    current, baseline = windows(end=end.isoformat(), days=7)
    first = current.start.isoformat()
    live.send([e for e in events if e["timestamp"][:10] < first])
    live.process()  # the lexical judge
    with FakeLLM() as fake:
        llm = replace(live.settings, judge="openai", openai_base_url=fake.url,
                      openai_api_key="sk-test", judge_model="gpt-4o-mini")  # fmt: skip
        live.send([e for e in events if e["timestamp"][:10] >= first])
        make_worker(llm).work(burst=True, with_scheduler=False)
    store = Store.connect(live.settings)
    written = write_report(store, current, baseline, tmp_path, progress=lambda _: None)
    (note,) = [n for n in written.report.notes if "judge identity" in n]
    assert "`lexical/lexical-1/per-event`" in note and "`gpt-4o-mini/umbrela-1/pointwise`" in note
    assert note.index("lexical") < note.index("gpt-4o-mini")  # the baseline's, then this week's
    assert "Note: the judge identity (model/prompt/mode) changed" in written.markdown.read_text()
