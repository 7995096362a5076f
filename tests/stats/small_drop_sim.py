"""How long a small series' drop keeps showing in the weekly report: one retriever at 10 events
a week (beside three of 700) loses -0.15 of its mean nDCG@10, and the report of each week after
the drop is run many times through the report's own `analyze()` with the 8-week trend.

    nice python -m tests.stats.small_drop_sim               # the full run (100 reports a row)
    nice python -m tests.stats.small_drop_sim --reports 30  # quicker, noisier

Prints one line per week after the drop: reports, the share naming the dropped retriever a
regression, and the time taken. "week 0" is the null: no drop in the 8 weeks. The rows from
week 8 on have no week before the drop in the trend: the drop is then the series' level.
"""

from __future__ import annotations

import argparse

import numpy as np

from tests.stats.report_sim import Scenario, _drop, run

PER_WEEK, DROP, OTHERS = 10, 0.15, 700
SEGMENTS = {"0.12": "sharp", "0.25": "default"}  # per-event SD of nDCG@10 -> traffic segment


def scenario(
    after: int, sd: str = "0.12", per_week: int = PER_WEEK, drop: float = DROP
) -> Scenario:
    """The report `after` weeks after the drop (0: no drop), 8 weeks of traffic."""
    base, cur = _drop(per_week, drop, SEGMENTS[sd], others=OTHERS)
    return Scenario(
        f"{per_week}/week, nDCG -{drop:.2f}, {after} weeks after",
        base,
        cur if after else base,
        target="bm25" if after else None,
        weeks=8,
        changed=after,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=100, help="reports per row")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--weeks", default="0,1,2,3,4,5,6,7", help="weeks after the drop")
    parser.add_argument("--sd", default="0.12", choices=sorted(SEGMENTS), help="per-event SD")
    args = parser.parse_args(argv)
    print(f"{'weeks after':>11} {'reports':>7} {'flagged':>8} {'s':>6}")
    for after in (int(w) for w in args.weeks.split(",")):
        o = run(scenario(after, args.sd), args.reports, args.seed * 100 + after)
        print(f"{after:11d} {o.reports:7d} {o.rate:8.0%} {o.seconds:6.1f}", flush=True)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
