"""How long a small series' drop keeps showing in the weekly report: one retriever at 10 events
a week (beside three of 700) loses 0.15 of its mean nDCG@10, and the report of each week after
the drop is run many times through the report's own `analyze()` with the 8-week trend (its
per-event records kept for the 8 weeks).

    nice python -m tests.stats.small_drop_sim               # the full run (100 reports a row)
    nice python -m tests.stats.small_drop_sim --reports 30  # quicker, noisier
    nice python -m tests.stats.small_drop_sim --sd 0.25     # a noisier measure

Prints one line per row: the weeks since the drop, the weeks since it recovered ("-": not
yet), reports, the share naming the dropped retriever a regression (the null row, no drop: any
regression), and the time taken. From 8 weeks on the trend holds no week before the drop: the
drop is then the series' level.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ragmon.report.analyze import Report, analyze
from ragmon.report.gather import Dataset
from tests.stats.report_sim import CURRENT, _drop
from tests.stats.traffic import Stream, window_data

PER_WEEK, DROP, OTHERS, WEEKS = 10, 0.15, 700, 8
SEGMENTS = {"0.12": "sharp", "0.25": "default"}  # per-event SD of nDCG@10 -> traffic segment
# (weeks since the drop, weeks since it recovered): 0 weeks since the drop is the null
ROWS = [(0, 0), *((after, 0) for after in range(1, WEEKS)), (4, 1), (4, 2), (6, 2)]


def one_report(
    rng: np.random.Generator,
    streams: tuple[list[Stream], list[Stream]],
    after: int,
    back: int,
    salt: int,
) -> Report:
    """The report of the last of 8 weeks; the drop in the weeks from `after` weeks ago until
    `back` weeks ago."""
    blocks = [
        window_data(
            rng,
            CURRENT.shifted(i - WEEKS + 1),
            streams[back <= WEEKS - 1 - i < after],
            salt=WEEKS * salt + i,
        )
        for i in range(WEEKS)
    ]
    return analyze(Dataset(blocks[-1], blocks[-2], blocks, True, 35.0))


def rate(after: int, back: int, reports: int, seed: int, sd: str) -> tuple[float, float]:
    """Share of reports naming the dropped retriever (the null: naming any), and seconds."""
    streams = _drop(PER_WEEK, DROP, SEGMENTS[sd], others=OTHERS)
    rng = np.random.default_rng(seed)
    started, hits = time.perf_counter(), 0
    for i in range(reports):
        rep = one_report(rng, streams, after, back, i)
        named = {r.group[2] for r in rep.regressions}
        hits += bool(named) if not after else "bm25" in named
    return hits / reports, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=100, help="reports per row")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--sd", default="0.12", choices=sorted(SEGMENTS), help="per-event SD")
    args = parser.parse_args(argv)
    print(f"{'weeks since drop':>16} {'recovered':>9} {'reports':>7} {'flagged':>8} {'s':>6}")
    for after, back in ROWS:
        share, s = rate(after, back, args.reports, args.seed * 100 + 10 * after + back, args.sd)
        print(f"{after:16d} {back or '-':>9} {args.reports:7d} {share:8.0%} {s:6.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
