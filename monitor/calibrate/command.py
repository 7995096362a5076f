"""`ragmon calibrate FILE [--limit N]`: load, probe the judge, grade, analyse, print."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import TextIO

from ragmon.calibrate.analysis import analyse
from ragmon.calibrate.grade import Outcome, Progress, judge_records, make_judge
from ragmon.calibrate.markdown import render
from ragmon.core.golden import parse_records
from ragmon.settings import Settings


def run_calibrate(
    path: Path, settings: Settings, limit: int | None = None, out: TextIO = sys.stdout
) -> int:
    """The `ragmon calibrate FILE [--limit N]` command; returns the exit code."""
    if settings.judge == "openai" and not settings.judge_configured:
        print(
            "ragmon calibrate: no LLM judge configured. Set OPENAI_API_KEY (and OPENAI_BASE_URL "
            "for a compatible server) and RAGMON_JUDGE_MODEL, or RAGMON_JUDGE=lexical.",
            file=sys.stderr,
        )
        return 2
    try:
        with path.open() as lines:
            records = parse_records(lines, str(path), limit)
    except (OSError, ValueError) as exc:
        print(f"ragmon calibrate: {exc}", file=sys.stderr)
        return 2
    if not records:
        print(f"ragmon calibrate: no records in {path}", file=sys.stderr)
        return 2
    for name in ("httpx", "httpx2", "openai"):  # one INFO line per HTTP call drowns the report
        logging.getLogger(name).setLevel(logging.WARNING)
    judge, store = make_judge(settings)
    if settings.judge == "openai":
        from ragmon.workers.judges.probe import probe_judge

        probe = probe_judge(settings, store)
        if probe.fatal:  # every call would fail the same way: say so now, not after retries
            print(f"ragmon calibrate: {probe.message}", file=sys.stderr)
            if store is not None:
                store.close()
            return 1

    async def go() -> Outcome:
        try:
            return await judge_records(records, judge, Progress(len(records)))
        finally:
            await judge.aclose()

    started = time.monotonic()
    outcome = asyncio.run(go())
    elapsed = time.monotonic() - started
    res = analyse(records, outcome, settings.measure_params())
    head = [
        f"# ragmon calibrate: judge `{judge.identity.label}` (model/prompt/mode) "
        f"against the known grades of {path.name}",
        "",
        f"{len(records)} records, {len({r.query for r in records})} queries, "
        f"{len({r.retriever for r in records})} retrievers; {len(outcome.grades)} distinct "
        f"passages judged in {elapsed:.1f} s",
    ]
    spent = getattr(judge, "accounting", None)  # an LLM judge's totals
    if spent is not None and spent.calls:
        head.append(
            f"judge calls: {spent.calls}, tokens in {spent.usage_in}, out {spent.usage_out}"
        )
    if outcome.failed_records:
        reasons = ", ".join(f"{k} x{v}" for k, v in sorted(outcome.failures.items()))
        head.append(f"FAILED: {outcome.failed_records} records not judged ({reasons})")
    if outcome.stopped:
        head.append(f"STOPPED early: {outcome.stopped}")
    print(render(res, head, settings.relevant_grade), file=out)
    if store is not None:
        store.close()
    return 1 if outcome.stopped or res["pairs"] == 0 else 0
