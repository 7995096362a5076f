"""Shared pieces of the fault tests: a retrying sender, waiting on statuses, the tally.

The tally is the figure each fault test reports: events sent, accepted (202/200 answered),
done (status `done` in the store), and counted (`ragmon_events_labeled_total` in /metrics).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import httpx
import psutil

from tests.support.events import make_event
from tests.support.stack import Stack, sample_value
from tests.support.waiting import scaled

FIGURES: list[Tally] = []  # reported by tests/reliability/conftest.py, printed at the end
FIGURE = "reliability figure"  # the user_properties key of one tally's line


@dataclass
class Tally:
    fault: str
    sent: int = 0
    accepted: int = 0
    done: int = 0
    counted: int = 0
    failed: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        extra = f"; {'; '.join(self.notes)}" if self.notes else ""
        return (
            f"{self.fault}: sent={self.sent} accepted={self.accepted} done={self.done} "
            f"counted={self.counted} failed={self.failed}{extra}"
        )

    def record(self) -> Tally:
        FIGURES.append(self)
        print(self.line(), flush=True)
        return self


def events(n: int, seed0: int, passages: int = 4, k: int = 2, app: str = "rel") -> list[dict]:
    """`n` small valid events with distinct ids and texts (seeded, reproducible)."""
    out = []
    for i in range(n):
        ev = make_event(n=passages, k=k, seed=seed0 + i, labels={"app": app, "retriever": "r"})
        ev["event_id"] = f"ev-{seed0 + i}"
        ev["query"] = f"{ev['query']} #{seed0 + i}"  # distinct queries: no judgment-cache hits
        out.append(ev)
    return out


class Sender(threading.Thread):
    """Posts events in batches (or one per request: `batch=1`, on /v1/retrievals); retries on
    503, 5xx and connection errors until accepted.

    A retried batch reuses its event ids, so an event stored just before a failure answers
    200 (duplicate) on the retry instead of being stored twice. With several `url`s (APIs behind
    a load balancer) the requests alternate between them, and one that refuses connections is
    left out from then on, as a balancer's health check would.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        evs: Sequence[dict],
        batch: int = 20,
        pause: float = 0.0,
        give_up: float = 120,
    ) -> None:
        super().__init__(daemon=True)
        self.urls = [url] if isinstance(url, str) else list(url)
        self.evs, self.batch, self.pause, self.give_up = evs, batch, pause, give_up
        self.sent: set[str] = set()
        self.accepted: set[str] = set()
        self.acked_at: dict[str, float] = {}  # event id -> time.monotonic() of its 2xx
        self.took: dict[str, float] = {}  # event id -> seconds its accepting request took
        self.retries = 0
        self.errors: list[str] = []
        self.down: set[str] = set()
        self.halt = threading.Event()  # set: no more requests after the one in hand

    def _next(self, clients: dict[str, httpx.Client], turn: int) -> httpx.Client:
        up = [u for u in self.urls if u not in self.down] or self.urls
        return clients[up[turn % len(up)]]

    def run(self) -> None:
        clients = {u: httpx.Client(base_url=u, timeout=10) for u in self.urls}
        turn = 0
        try:
            for i in range(0, len(self.evs), self.batch):
                if self.halt.is_set():
                    break
                chunk = list(self.evs[i : i + self.batch])
                self.sent.update(e["event_id"] for e in chunk)
                deadline = time.monotonic() + self.give_up
                while True:
                    client, turn = self._next(clients, turn), turn + 1
                    asked = time.monotonic()
                    try:
                        if self.batch == 1:
                            r = client.post("/v1/retrievals", json=chunk[0])
                        else:
                            r = client.post("/v1/retrievals/batch", json={"events": chunk})
                    except httpx.TransportError as exc:
                        r, why = None, type(exc).__name__
                        if isinstance(exc, httpx.ConnectError) and len(self.urls) > 1:
                            self.down.add(str(client.base_url).rstrip("/"))
                    else:
                        why = str(r.status_code)
                    if r is not None and r.status_code < 300:
                        answer = r.json()
                        now = time.monotonic()
                        for res in answer["results"] if self.batch > 1 else [answer]:
                            if res["status"] in ("queued", "done", "failed"):
                                self.accepted.add(res["event_id"])
                                self.acked_at[res["event_id"]] = now
                                self.took[res["event_id"]] = now - asked
                        break
                    if r is not None and r.status_code < 500:
                        self.errors.append(f"{r.status_code}: {r.text[:200]}")
                        break
                    if time.monotonic() > deadline:
                        self.errors.append(f"gave up after {self.give_up}s: {why}")
                        break
                    self.retries += 1
                    retry_after = r.headers.get("retry-after") if r is not None else None
                    time.sleep(min(float(retry_after or 0.2), 1.0))
                if self.pause:
                    time.sleep(self.pause)
        finally:
            for c in clients.values():
                c.close()


def statuses(stack: Stack, ids: Iterable[str], app: str = "rel") -> dict[str, str]:
    """Status of each event of `app` straight from the store (one round trip)."""
    from ragmon.core.wire import event_ref
    from ragmon.store import Store

    ids = list(ids)
    store = Store.connect(_settings(stack))
    try:
        found = store.statuses([event_ref(app, i) for i in ids])
        return {i: (s or "unknown") for i, s in zip(ids, found, strict=True)}
    finally:
        store.client.close()


def _settings(stack: Stack):  # noqa: ANN202 - ragmon.settings.Settings
    from ragmon.settings import Settings

    return Settings.from_env({"REDIS_URL": stack.env["REDIS_URL"]}, dotenv=None)


def wait_status(
    stack: Stack,
    ids: Iterable[str],
    want: str | set[str] = "done",
    timeout: float = 60,
    poll: float = 0.5,
    app: str = "rel",
) -> dict[str, str]:
    """Poll until every event has a status in `want` (or the timeout); returns the statuses."""
    ids = list(ids)
    wanted = {want} if isinstance(want, str) else want
    deadline = time.monotonic() + scaled(timeout)
    while True:
        st = statuses(stack, ids, app)
        if all(s in wanted for s in st.values()) or time.monotonic() > deadline:
            return st
        time.sleep(poll)


def observed(redis_url: str) -> tuple[int, int]:
    """How many times events were observed: the lifetime nDCG histogram's count, and the
    entries of the per-day lists."""
    from ragmon.store.address import sync_client

    client = sync_client(redis_url)
    try:
        hist = client.hgetall("ragmon:h")
        ndcg = sum(
            int(v)
            for k, v in hist.items()
            if k.startswith(b"retrieval_ndcg|") and k.endswith(b"|count")
        )
        day_lists = sum(client.llen(k) for k in client.scan_iter("ragmon:day:*:ev*"))
    finally:
        client.close()
    return ndcg, day_lists


def observed_once(redis_url: str, n: int) -> None:
    """Each of `n` done events was observed exactly once."""
    ndcg, day_lists = observed(redis_url)
    assert ndcg == n, f"nDCG observed {ndcg} times for {n} events"
    assert day_lists == n, f"{day_lists} per-day entries for {n} events"


def labeled(stack: Stack) -> int:
    """`ragmon_events_labeled_total` as /metrics exports it."""
    try:
        return int(sample_value(stack.metrics(), "ragmon_events_labeled_total"))
    except KeyError:
        return 0


def metric(stack: Stack, name: str, labels: dict[str, str] | None = None) -> float:
    try:
        return sample_value(stack.metrics(), name, labels)
    except KeyError:
        return 0.0


def worker_name(proc: psutil.Process | int) -> str:
    """The `--name` a `ragmon worker` process was started with."""
    p = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
    cmd = p.cmdline()
    return cmd[cmd.index("--name") + 1]
