"""How often the weekly report calls a regression: nothing-changes scenarios and real drops,
each run through the report's own `analyze()` many times.

    nice python -m tests.stats.report_sim               # the full run (200+ reports each)
    nice python -m tests.stats.report_sim --reports 40  # quicker, noisier
    nice python -m tests.stats.report_sim --only paraphrased --query-only  # clusters by query
    nice python -m tests.stats.report_sim --only planned --unweighted  # plain means (no weights)
    nice python -m tests.stats.report_sim --reports 100 --only "SD 0.2"  # trending weeks

Prints one line per scenario: reports, the share with a regression (for the drops: with the
dropped retriever among the regressions), the share naming a mix shift, the time taken, and
for the drops `alone`: the share whose dropped retriever's nDCG@K is worse with p below the
report's level over the retrievers (what a report testing nDCG@K alone would find).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ragmon.core.window import windows
from ragmon.report.analyze import Report, analyze
from ragmon.report.family import ALPHA, PRIMARY
from ragmon.report.gather import SMALL_HISTORY_WEEKS as HISTORY
from ragmon.report.gather import Dataset
from tests.stats import traffic
from tests.stats.traffic import Stream, bank, noise_for_mean, window_data

CURRENT, BASELINE = windows(end="2026-11-22", days=7)
NOISE = 4.0  # ranking noise of a typical retriever: mean nDCG@10 ~0.6 on the default pool


@dataclass(frozen=True)
class Scenario:
    name: str
    base: list[Stream]
    cur: list[Stream]
    target: str | None = None  # the retriever that truly got worse (power scenarios)
    limit: str = "<= 5%"
    weeks: int = 2  # weeks of traffic: more give the report its trend, so small series widen
    # (the last `changed` weeks carry `cur`, the ones before `base`)
    changed: int = 1


def _three(per_week: int, **kw: object) -> list[Stream]:
    return [
        Stream(r, per_week, n, **kw) for r, n in (("bm25", NOISE), ("dense", 3.0), ("hybrid", 5.0))
    ]  # type: ignore[arg-type]


def _tiny(rng: np.random.Generator) -> list[Stream]:
    return [Stream(f"r{i:02d}", int(rng.integers(2, 13)), NOISE) for i in range(30)]


def _drop(
    per_week: int,
    drop: float,
    segment: str = "sharp",
    others: int | None = None,
    kb: int = 0,
    noise: float | None = None,
) -> tuple[list[Stream], list[Stream]]:
    """Three retrievers of the segment's quality; bm25's mean nDCG falls by `drop`. `others`:
    the other two retrievers' events a week (default: as many as bm25's); `kb`: passages of a
    knowledge base of that many documents; `noise`: the ranking noise (default: SD 0.12 for
    "sharp", 0.25 for "default")."""
    if noise is None:
        noise = 1.0 if segment == "sharp" else NOISE
    base = [
        Stream(r, per_week if r == "bm25" or others is None else others, noise,
               segments={segment: 1.0}, kb=kb)
        for r in ("bm25", "dense", "hybrid")
    ]  # fmt: skip
    mean = float(np.nanmean(bank(segment, noise)["ndcg"]))
    worse = noise_for_mean(segment, mean - drop)
    return base, [replace(base[0], noise=worse), *base[1:]]


SD02 = 2.5  # ranking noise of "sharp" queries with nDCG@10 0.56, SD 0.20 of one event


def _trending_week(
    share: float, drop: float = 0.0, per_week: int = 500
) -> tuple[list[Stream], list[Stream]]:
    """Three retrievers at SD 0.2 (bm25's nDCG falling by `drop`); this week `share` of each
    day asks one topic of the week in 50 wordings (one cluster, new this week)."""
    base, cur = _drop(per_week, drop, noise=SD02)
    return base, [replace(s, paraphrased=share, weekly=True) for s in cur]


def _trending(share: float, drop: float) -> Scenario:
    what = f"power at SD 0.2: nDCG -{drop:.2f}" if drop else "trending week: SD 0.2"
    return Scenario(
        f"{what}, 500/week, {share:.0%} of this week 1 topic",
        *_trending_week(share, drop),
        target="bm25" if drop else None,
        limit=">= 80%" if drop else "<= 5%",
    )


def tiny_scenario(rng: np.random.Generator) -> Scenario:
    """The first of `scenarios` (the first draws of `rng`), alone: it needs none of the banks
    the others calibrate their noise on."""
    tiny = _tiny(rng)
    return Scenario("tiny series: 30 retrievers, 2-12 events/week", tiny, tiny, weeks=HISTORY)


def scenarios(rng: np.random.Generator) -> list[Scenario]:
    mix_base = _three(1000, segments={"billing": 0.5, "howto": 0.5})
    mix_cur = [replace(s, segments={"billing": 0.8, "howto": 0.2}) for s in mix_base]
    d05, d10 = _drop(500, 0.05), _drop(100, 0.10)
    tiny = tiny_scenario(rng)
    small = [*_tiny(rng)[:3], *_three(700)]
    return [
        tiny,
        Scenario(
            "clustered: 700/week, 20% from 3 trending queries a day",
            _three(700, trending=0.2),
            _three(700, trending=0.2),
        ),  # fmt: skip
        Scenario(
            "clustered: 4,900/week, 20% from 3 trending queries a day",
            _three(4900, trending=0.2),
            _three(4900, trending=0.2),
        ),  # fmt: skip
        *(
            Scenario(
                f"paraphrased: 700/week, {share:.0%} a day ask 1 topic in 50 wordings{how}",
                _three(700, paraphrased=share, spread=spread),
                _three(700, paraphrased=share, spread=spread),
            )
            for share, spread, how in (
                (0.2, 0.0, ""),
                (0.4, 0.0, ""),
                (0.2, 0.5, ", own rankings"),
                (0.4, 0.5, ", own rankings"),
            )
        ),  # fmt: skip
        Scenario("segment mix only: billing 50% -> 80%", mix_base, mix_cur),
        Scenario("large iid: 3 x 20,000/week", _three(20_000), _three(20_000)),
        Scenario("power: nDCG -0.05 for 1 of 3 at 500/week", *d05, target="bm25", limit=">= 90%"),
        Scenario("power: nDCG -0.10 for 1 of 3 at 100/week", *d10, target="bm25", limit=">= 80%"),
        *(
            Scenario(
                f"power: nDCG -0.07 for 1 of 3 at 300/week, {where}",
                *_drop(300, 0.07, "default", kb=kb),
                target="bm25",
                limit="info",
            )
            for kb, where in ((0, "distinct passages"), (200, "200-document knowledge base"))
        ),
        Scenario(
            "power at SD 0.25: nDCG -0.05, 500/week",
            *_drop(500, 0.05, "default"),
            target="bm25",
            limit="info",
        ),  # fmt: skip
        Scenario(
            "power at SD 0.25: nDCG -0.10, 100/week",
            *_drop(100, 0.10, "default"),
            target="bm25",
            limit="info",
        ),  # fmt: skip
        # a trending week (issue 46 item 2): one topic new this week, in 50 wordings
        Scenario(
            "power at SD 0.2: nDCG -0.05, 500/week",
            *_drop(500, 0.05, noise=SD02),
            target="bm25",
            limit=">= 80%",
        ),
        *(_trending(share, drop) for drop in (0.0, 0.05) for share in (0.2, 0.4)),
        # small series (issue 34 item 5): the weeks a small series is scanned over
        Scenario("small beside large: 3 of 2-12/week, 3 of 700/week", small, small, weeks=HISTORY),
        *(
            Scenario(
                f"power small: nDCG -{drop:.2f} for 1 at {n}/week (others 700), 4 of 8 weeks",
                *_drop(n, drop, others=700),
                target="bm25",
                limit="info",
                weeks=8,
                changed=4,
            )
            for n, drop in ((3, 0.2), (6, 0.1), (12, 0.1))
        ),
        # planned sampling (issue 35): rates that follow quality, the other way in each week
        Scenario(
            "planned: 700/week, rates 0.25/1.0 by quality, swapped in the current week",
            _three(700, judged=(0.25, 1.0)),
            _three(700, judged=(1.0, 0.25)),
        ),
        Scenario(
            "planned: 700/week at one rate 0.3, plus 20% trending",
            _three(700, judged=(0.3, 0.3), trending=0.2),
            _three(700, judged=(0.3, 0.3), trending=0.2),
        ),
    ]


def one_report(sc: Scenario, rng: np.random.Generator, salt: int) -> Report:
    """The report of the last week of `sc.weeks` weeks of traffic (a trend when more than 2)."""
    weeks = [
        window_data(
            rng,
            CURRENT.shifted(back - sc.weeks + 1),
            sc.cur if back >= sc.weeks - sc.changed else sc.base,
            salt=sc.weeks * salt + back,
        )
        for back in range(sc.weeks)
    ]
    trend = weeks if sc.weeks > 2 else []
    return analyze(Dataset(weeks[-1], weeks[-2], trend, True, 35.0))


@dataclass
class Outcome:
    reports: int = 0
    flagged: int = 0  # a regression (power: of the target retriever)
    # power: the target's primary measure worse with p below ALPHA over the retrievers tested:
    # what a report testing that measure alone (Bonferroni over the retrievers) would find
    alone: int = 0
    mix_named: int = 0
    retrievers: int = 0  # retrievers with data in both windows
    decided: int = 0  # of them, with a verdict (not "too few events to tell" or another reason)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.flagged / self.reports if self.reports else 0.0


def run(
    sc: Scenario, reports: int, seed: int, progress: Callable[[str], None] | None = None
) -> Outcome:
    rng = np.random.default_rng(seed)
    out = Outcome()
    started = time.perf_counter()
    for i in range(reports):
        rep = one_report(sc, rng, salt=i)
        groups = {r.group[2] for r in rep.regressions}
        out.flagged += (sc.target in groups) if sc.target else bool(groups)
        primary = [r for r in rep.rows if r.measure == PRIMARY and r.change is not None]
        out.alone += any(
            r.group[2] == sc.target and r.worse and r.tested.pvalue < ALPHA / len(primary)
            for r in primary
        )
        out.mix_named += bool(rep.mix_shifts)
        for v in rep.verdicts:
            out.retrievers += 1
            out.decided += v.verdict in ("regression", "improvement", "mixed", "unchanged")
        out.reports += 1
        if progress and (i + 1) % 50 == 0:
            progress(f"  {sc.name}: {i + 1}/{reports}")
    out.seconds = time.perf_counter() - started
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=200, help="reports per scenario")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--only", help="run the scenarios whose name contains this (several: separated by |)"
    )
    parser.add_argument(
        "--query-only",
        action="store_true",
        help="records without passage ids: clusters by the query key alone (before issue 34)",
    )
    parser.add_argument(
        "--unweighted",
        action="store_true",
        help="judged events without their inclusion probability: plain means (before issue 35)",
    )
    args = parser.parse_args(argv)
    traffic.PASSAGES = not args.query_only
    traffic.WEIGHTED = not args.unweighted
    rng = np.random.default_rng(args.seed)
    print(
        f"{'scenario':58} {'reports':>7} {'regression':>10} {'limit':>7} {'mix named':>9} "
        f"{'verdicts':>8} {'s':>6} {'alone':>6}"
    )
    for i, sc in enumerate(scenarios(rng)):
        if args.only and not any(word in sc.name for word in args.only.split("|")):
            continue
        o = run(sc, args.reports, args.seed * 100 + i, lambda m: print(m, flush=True))
        print(
            f"{sc.name:58} {o.reports:7d} {o.rate:10.1%} {sc.limit:>7} "
            f"{o.mix_named / o.reports:9.0%} {o.decided / max(1, o.retrievers):8.1%} "
            f"{o.seconds:6.1f} {f'{o.alone / o.reports:.0%}' if sc.target else '':>6}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
