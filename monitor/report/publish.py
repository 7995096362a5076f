"""Publish a drift report: gather, analyze, plot, write report.md + report.html, keep N, notify.

Shared by `ragmon report`, `ragmon demo --report` and the weekly job of the scheduling worker.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from ragmon.core.window import Window, windows
from ragmon.oversight import Oversight
from ragmon.preflight import redis_problem
from ragmon.report.analyze import Report, analyze, summary_line
from ragmon.report.compare import NAMES
from ragmon.report.document import to_html, to_markdown
from ragmon.report.gather import (
    Progress,
    gather,
    load_event_details,
    record_ref,
    stderr_progress,
)
from ragmon.settings import Settings
from ragmon.store import Store

log = logging.getLogger("ragmon.report")
WEBHOOK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Written:
    """What a run produced: the latest copies, the dated ones, and the analysis."""

    markdown: Path
    html: Path
    dated_html: Path
    report: Report


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


MANIFEST = ".ragmon-reports"  # the dated reports ragmon wrote in a directory, oldest first


def prune(out: Path, stem: str, keep: int) -> list[Path]:
    """Record `stem` as written and keep the newest `keep` dated reports that ragmon wrote in
    `out` (listed in its MANIFEST): any other file, whatever its name, is left alone."""
    manifest = out / MANIFEST
    stems = manifest.read_text().split() if manifest.exists() else []
    stems = [s for s in stems if s != stem] + [stem]
    removed = []
    for old in stems[:-keep]:
        for p in (out / f"{old}.html", out / f"{old}.md"):
            if p.exists():
                p.unlink()
                removed.append(p)
    _write(manifest, "".join(f"{s}\n" for s in stems[-keep:]))
    return removed


def explorer_address(settings: Settings, given: str | None = None) -> str | None:
    """Where the worst events link to: `--explorer-url`, else RAGMON_EXPLORER_URL, else
    RAGMON_URL (the API as the apps reach it, which serves the explorer too); None when none
    is known."""
    for url in (given, settings.explorer_url, os.environ.get("RAGMON_URL")):
        if url and url.strip().lower().startswith(("http://", "https://")):
            return url.strip()
    return None


def write_report(
    store: Store,
    current: Window,
    baseline: Window,
    out: Path,
    keep: int = 12,
    progress: Progress = stderr_progress,
    explorer_url: str | None = None,
) -> Written:
    """Build the report for `current` against `baseline` and write it into `out`; event ids
    link to `explorer_url` (default: `explorer_address(store.settings)`)."""
    from ragmon.report import plots
    from ragmon.report.render import build

    data = gather(store, current, baseline, progress)
    data.explorer_url = explorer_url or explorer_address(store.settings)
    progress("comparing windows")
    report = analyze(data)
    refs = [record_ref(e) for e in report.worst_ndcg + report.worst_harm]
    report.details = load_event_details(store, list(dict.fromkeys(refs)))
    progress("agreement with people and corrected estimates")
    oversight = Oversight(store, store.settings.measure_params())
    report.agreement = oversight.agreement()
    report.estimates = oversight.estimates(current)
    report.anchor_runs = store.anchors.runs()
    images = {}
    progress("plotting the 8-week trend")
    images.update(plots.trend_pngs(report))
    for g in plots.overlay_groups(report):
        progress(f"plotting distributions of {'/'.join(g)}")
        images[f"Distributions this week vs baseline: {'/'.join(g)}"] = plots.overlay_png(
            report.rows, g
        )
    doc = build(report, images)
    out.mkdir(parents=True, exist_ok=True)
    stem = "report-" + current.label.replace("..", "_")
    md, page = to_markdown(doc), to_html(doc)
    dated_html = out / f"{stem}.html"
    _write(out / f"{stem}.md", md)
    _write(dated_html, page)
    _write(out / "report.md", md)
    _write(out / "report.html", page)
    for p in prune(out, stem, keep):
        progress(f"removed old report {p.name}")
    progress(f"wrote {out / 'report.html'} and {out / 'report.md'}")
    return Written(out / "report.md", out / "report.html", dated_html, report)


def post_summary(url: str, report: Report, location: str) -> bool:
    """POST a Slack-compatible `{"text": ...}` summary; False (logged) when it fails."""
    lines = [summary_line(report)]
    for i, r in enumerate(report.regressions[:3], 1):
        h = r.headline
        lines.append(
            f"{i}. {'/'.join(r.group)} {NAMES[h.measure]}: {h.tested.estimate:+.3f} "
            f"({r.evidence}); look first: {r.look_first[0]}"
        )
    lines.append(f"Full report: {location}")
    try:
        resp = httpx.post(url, json={"text": "\n".join(lines)}, timeout=WEBHOOK_TIMEOUT_S)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        log.warning("report webhook failed: %s", exc)
        return False
    return True


def run_report(
    settings: Settings,
    out: Path,
    *,
    end: str | None = None,
    days: int = 7,
    week: str | None = None,
    baseline: str = "previous",
    explorer_url: str | None = None,
) -> int:
    """The `ragmon report` command (also `ragmon demo --report`); returns the exit code."""
    try:
        current, base = windows(end=end, days=days, week=week, baseline=baseline)
    except ValueError as exc:
        print(f"ragmon report: {exc}", file=sys.stderr)
        return 2
    store = Store.connect(settings)
    problem = redis_problem(store)  # one line, the password masked
    if problem is not None:
        print(f"ragmon report: {problem}", file=sys.stderr)
        return 1
    written = write_report(
        store, current, base, out, settings.report_keep, explorer_url=explorer_url
    )
    print(summary_line(written.report))
    print(f"report: {written.html.resolve()}")
    if settings.report_webhook:
        post_summary(settings.report_webhook, written.report, str(written.dated_html.resolve()))
    return 0
