"""A quiet app's single event behind another app's backlog (issue 37: fair across apps).

    .venv/bin/python -m tests.bench.bench_fairness [--short] [--backlog 3000] [--latency 0.05]

`ragmon serve`, two `ragmon worker`s with the real OpenAIJudge against the fake LLM
(`tests.support.fake_llm`, every answer after `--latency`), 20 judged passages an event, each
its own query. Baseline: the quiet app's single event posted to an idle fleet, from its 202 to
`done` (`GET /v1/retrievals/{id}` polled every 20 ms). Then app `busy` stores `--backlog`
events at once; once the workers are judging them, the quiet app posts one event, timed the
same way, while the backlog is still being drained. Target: done within 5 s, however large
the backlog (the drain takes the apps in turn: CONTRIBUTING.md, "Fair across apps").
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from datetime import UTC, datetime

import httpx

from ragmon.api.schemas import RetrievalEvent
from ragmon.settings import Settings
from ragmon.store import IngestItem, Store
from tests.bench.bench_freshness import labeled
from tests.bench.bench_worker import JUDGED_PER_EVENT, start_fake_llm
from tests.bench.common import data_source, exit_on_sigterm, machine, make_event, topics
from tests.support.stack import ragmon_env, redis_server, start_api, start_worker

TARGET_S = 5.0


def app_event(pairs: list, app: str, i: int, run: str) -> dict:
    """Event `i` of `app`, its own query (no judgment-cache hits)."""
    query, texts = pairs[i % len(pairs)]
    event = make_event(f"{query} (#{app}-{run}-{i})", texts, f"{app}-{run}-{i}", i)
    event["labels"]["app"] = app
    return event


def quiet_event(pairs: list, i: int) -> dict:
    return app_event(pairs, "quiet", i, uuid.uuid4().hex[:8])


def time_to_done(client: httpx.Client, event: dict, timeout: float = 300) -> float:
    """POST one event; seconds from its 202 to GET answering `done`."""
    r = client.post("/v1/retrievals", json=event)
    r.raise_for_status()
    accepted = time.perf_counter()
    url = f"/v1/retrievals/{event['event_id']}"
    while time.perf_counter() - accepted < timeout:
        got = client.get(url, params={"app": "quiet"}).json()
        if got.get("status") == "done":
            return time.perf_counter() - accepted
        time.sleep(0.02)
    raise TimeoutError(f"the quiet event was not done in {timeout} s")


def backlog_items(pairs: list, n: int) -> list[IngestItem]:
    """`n` events of app `busy`, normalized as the API stores them."""
    run = uuid.uuid4().hex[:8]
    items = []
    for i in range(n):
        ev = app_event(pairs, "busy", i, run)
        ev["timestamp"] = datetime.now(UTC).isoformat()
        payload = RetrievalEvent.model_validate(ev).model_dump_json(exclude_none=True)
        items.append(IngestItem(ev["event_id"], payload, app="busy"))
    return items


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_fairness", description=__doc__)
    p.add_argument("--short", action="store_true", help="a 300-event backlog (CI)")
    p.add_argument("--backlog", type=int, default=None, help="events of the busy app (3000)")
    p.add_argument("--latency", type=float, default=0.05, help="fake LLM answer delay, s")
    args = p.parse_args(argv)
    exit_on_sigterm()
    n = args.backlog or (300 if args.short else 3000)
    print(machine())
    print(f"data: {data_source()}")
    pairs = topics(short=args.short)
    fake, llm_url = start_fake_llm(args.latency)
    llm = {"RAGMON_JUDGE": "openai", "OPENAI_BASE_URL": llm_url, "OPENAI_API_KEY": "x"}
    workers = []
    try:
        with redis_server() as rs:
            env = ragmon_env(rs.url, **llm)
            api, url = start_api(env)
            workers = [start_worker(env, f"bench-fair-{i}-{os.getpid()}") for i in range(2)]
            store = Store.connect(Settings.from_env(env, dotenv=None))
            client = httpx.Client(base_url=url, timeout=30)
            try:
                time_to_done(client, quiet_event(pairs, 0))  # the workers' first job, warm
                idle = min(time_to_done(client, quiet_event(pairs, s)) for s in (1, 2, 3))
                items = backlog_items(pairs, n)
                for j in range(0, n, 500):
                    store.ingest(items[j : j + 500])
                base = labeled(store.client)
                while labeled(store.client) < base + 10:  # the workers are in the backlog
                    time.sleep(0.05)
                behind = time_to_done(client, quiet_event(pairs, 4))
                left = n - (labeled(store.client) - base)
            finally:
                client.close()
                store.client.close()
                for w in workers:
                    w.stop()
                api.stop()
    finally:
        os.killpg(fake.pid, 15)
        fake.wait(10)
    print(f"two workers, fake LLM {args.latency:g} s, {JUDGED_PER_EVENT} judged passages an "
          f"event; app `busy` stored {n:,} events at once")  # fmt: skip
    print(f"quiet app's single event, idle fleet (baseline, best of 3): {idle:.2f} s")
    print(f"quiet app's single event behind the backlog: {behind:.2f} s "
          f"({behind / idle:.1f}x the baseline; {left:,} of the backlog's events still "
          f"waiting when it was done)")  # fmt: skip
    met = behind <= TARGET_S and left > 0
    print(
        f"target: done within {TARGET_S:g} s while the backlog waits: "
        + ("met" if met else "MISSED")
    )
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
