"""How long a small series' drop keeps showing in the weekly report: one retriever at 10 events
a week (beside three of 700) loses 0.15 of its mean nDCG@10, and the report of each week after
the drop is run many times through the report's own `analyze()` with the weeks a small series
is scanned over (`gather.SMALL_HISTORY_WEEKS`, its per-event records kept for all of them).

    nice python -m tests.stats.small_drop_sim               # the full run (100 reports a row)
    nice python -m tests.stats.small_drop_sim --reports 30  # quicker, noisier
    nice python -m tests.stats.small_drop_sim --sd 0.25     # a noisier measure
    nice python -m tests.stats.small_drop_sim --weeks 8     # the 8-week scan (before issue 46)

Prints one line per row: the weeks since the drop, the weeks since it recovered ("-": not
yet), reports, the share naming the dropped retriever a regression (the null row, no drop: any
regression), and the time taken. Once the weeks scanned hold no week before the drop, the drop
is the series' level.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ragmon.report.analyze import Report, analyze
from ragmon.report.gather import SMALL_HISTORY_WEEKS, Dataset
from tests.stats.report_sim import CURRENT, _drop
from tests.stats.traffic import Stream, window_data

PER_WEEK, DROP, OTHERS = 10, 0.15, 700
SEGMENTS = {"0.12": "sharp", "0.25": "default"}  # per-event SD of nDCG@10 -> traffic segment


def rows(weeks: int) -> list[tuple[int, int]]:
    """(weeks since the drop, weeks since it recovered): 0 weeks since the drop is the null."""
    return [(0, 0), *((after, 0) for after in range(1, weeks)), (4, 1), (4, 2), (6, 2)]


def one_report(
    rng: np.random.Generator,
    streams: tuple[list[Stream], list[Stream]],
    after: int,
    back: int,
    salt: int,
    weeks: int = SMALL_HISTORY_WEEKS,
) -> Report:
    """The report of the last of `weeks` weeks; the drop in the weeks from `after` weeks ago
    until `back` weeks ago."""
    blocks = [
        window_data(
            rng,
            CURRENT.shifted(i - weeks + 1),
            streams[back <= weeks - 1 - i < after],
            salt=weeks * salt + i,
        )
        for i in range(weeks)
    ]
    return analyze(Dataset(blocks[-1], blocks[-2], blocks, True, 35.0))


def rate(
    after: int, back: int, reports: int, seed: int, sd: str, weeks: int
) -> tuple[float, float]:
    """Share of reports naming the dropped retriever (the null: naming any), and seconds."""
    streams = _drop(PER_WEEK, DROP, SEGMENTS[sd], others=OTHERS)
    rng = np.random.default_rng(seed)
    started, hits = time.perf_counter(), 0
    for i in range(reports):
        rep = one_report(rng, streams, after, back, i, weeks)
        named = {r.group[2] for r in rep.regressions}
        hits += bool(named) if not after else "bm25" in named
    return hits / reports, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=100, help="reports per row")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--sd", default="0.12", choices=sorted(SEGMENTS), help="per-event SD")
    parser.add_argument("--weeks", type=int, default=SMALL_HISTORY_WEEKS, help="weeks scanned")
    parser.add_argument("--after", help="only these weeks since the drop (comma-separated)")
    args = parser.parse_args(argv)
    wanted = rows(args.weeks)
    if args.after:
        wanted = [r for r in wanted if str(r[0]) in args.after.split(",")]
    print(f"{'weeks since drop':>16} {'recovered':>9} {'reports':>7} {'flagged':>8} {'s':>6}")
    for after, back in wanted:
        seed = args.seed * 100 + 10 * after + back
        share, s = rate(after, back, args.reports, seed, args.sd, args.weeks)
        print(f"{after:16d} {back or '-':>9} {args.reports:7d} {share:8.0%} {s:6.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
