"""How tight are the corrected estimates, and is a sample that is not random caught? Simulated
windows of judged events (the model of `tests.stats.anchor_sim`), a few graded by people, through
`ragmon.core.reviews.estimates` as the service calls it.

    nice python -m tests.stats.ppi_sim              # 300 replications per case (~15 min)
    nice python -m tests.stats.ppi_sim --reps 100   # quicker, noisier

Per judge (good, biased), number of graded events (30, 100, 300) and the way people grade:

- `random`: events drawn uniformly among the window's judged ones (the review page);
- `looks bad`: only events whose judge's mean grade of the top K is below the window's median;
- `judge change`: the window's second half is judged by another identity that over-grades by
  one grade, and people grade only events of the first half.

Prints how often the 95 % corrected interval holds the true mean, its mean width beside
classical PPI's (lambda = 1, Angelopoulos et al. 2023, normal interval: its width, the ratio and
its coverage) and the plain people-only t interval's on the same replications, how often
the estimate was withheld as not a random draw (`flagged`: any measure of the series), and
`bound`: how often the estimate +/- 1.1 times classical PPI's half-width holds the true mean,
the most a symmetric interval within the width target can cover.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field

import numpy as np

from ragmon.core.corrected import GradedEvent, Units, ppi_mean
from ragmon.core.drift import t_ppf
from ragmon.core.measures import DEFAULT_PARAMS
from ragmon.core.reviews import estimates
from tests.stats.anchor_sim import JUDGES, MEASURES, NAMES, Judge, K, Truth, truth, units_of, window

GRADED = (30, 100, 300)
PATTERNS = ("random", "looks bad", "judge change")
Z = 1.959963984540054
WIDTH_TARGET = 1.1  # intervals at most 10 % wider than classical PPI's


@dataclass
class Case:
    covered: dict[str, list[bool]] = field(default_factory=dict)
    widths: dict[str, list[float]] = field(default_factory=dict)
    flagged: list[bool] = field(default_factory=list)

    def add(self, key: str, low: float, high: float, truth: float) -> None:
        self.covered.setdefault(key, []).append(low <= truth <= high)
        self.widths.setdefault(key, []).append(high - low)

    def rate(self, key: str) -> float:
        xs = self.covered.get(key, [])
        return float(np.mean(xs)) if xs else math.nan

    def width(self, key: str) -> float:
        xs = self.widths.get(key, [])
        return float(np.mean(xs)) if xs else math.nan


def classical(u: Units) -> tuple[float, float]:
    """Classical PPI's 95 % interval, unweighted, each unit its own cluster (as simulated)."""
    n, m = len(u.human), len(u.judge_rest)
    diff = u.human - u.judge
    est = float(u.judge_rest.mean() + diff.mean())
    half = Z * math.sqrt(diff.var(ddof=1) / n + u.judge_rest.var(ddof=1) / m)
    return (est - half) * u.scale, (est + half) * u.scale


def plain(u: Units) -> tuple[float, float]:
    """The plain people-only t interval."""
    n = len(u.human)
    half = t_ppf(0.975, n - 1) * float(u.human.std(ddof=1)) / math.sqrt(n)
    mean = float(u.human.mean())
    return (mean - half) * u.scale, (mean + half) * u.scale


def draw(
    rng: np.random.Generator, judge: Judge, events: int, graded: int, pattern: str
) -> list[GradedEvent]:
    """One window's judged events, `graded` of them graded by people as `pattern` says."""
    w = window(rng, judge, events)
    ids = ["A"] * len(w.weight)
    human, judged = w.human, w.judge
    chosen = np.arange(len(w.weight))
    if pattern == "judge change":
        later = window(rng, Judge("over-grading", judge.noise, judge.shift + 1.0), events)
        half = events // 2
        human = np.concatenate([w.human[:half], later.human[half:]])
        judged = np.concatenate([w.judge[:half], later.judge[half:]])
        ids = ["A"] * half + ["B"] * (len(later.weight) - half)
        chosen = np.arange(half)
    elif pattern == "looks bad":
        mean = w.judge.mean(axis=1)
        chosen = np.flatnonzero(mean < np.median(mean))
    sample = set(rng.choice(chosen, graded, replace=False).tolist())
    none = [None] * K
    return [
        GradedEvent(judged[i].tolist(), human[i].tolist() if i in sample else none, K,
                    judge_id=ids[i])
        for i in range(len(ids))
    ]  # fmt: skip


def replicate(
    judge: Judge, graded: int, pattern: str, t: Truth, reps: int, events: int, seed: int
) -> Case:
    rng = np.random.default_rng(seed)
    out = Case()
    for _ in range(reps):
        evs = draw(rng, judge, events, graded, pattern)
        found = estimates(evs, DEFAULT_PARAMS)
        out.flagged.append(any(c.random_draw is False for c in found.values()))
        for m in MEASURES:
            u = units_of(evs, m)
            got = ppi_mean(u)
            low, high = classical(u)
            if got.estimate is not None:
                e = got.estimate
                out.add(f"{m}.ppi++", e.low, e.high, t.means[m])
                # the best any interval around the estimate may do within the width target
                half = WIDTH_TARGET * (high - low) / 2
                out.add(f"{m}.bound", e.estimate - half, e.estimate + half, t.means[m])
            out.add(f"{m}.classical", low, high, t.means[m])
            out.add(f"{m}.people", *plain(u), t.means[m])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300, help="replications per case")
    parser.add_argument("--events", type=int, default=2000, help="judged events per window")
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--graded", type=int, nargs="*", default=list(GRADED))
    parser.add_argument("--patterns", nargs="*", default=list(PATTERNS))
    parser.add_argument("--judges", nargs="*", default=["good", "biased"])
    args = parser.parse_args(argv)
    judges = [j for j in JUDGES if j.label in args.judges]
    print(f"{'judge':7} {'pattern':13} {'graded':>6} {'measure':7} {'cover':>6} {'width':>6} "
          f"{'PPI':>6} {'ratio':>6} {'cover':>6} {'people':>6} {'flagged':>7} {'bound':>6}",
          flush=True)  # fmt: skip
    for i, judge in enumerate(judges):
        t = truth(judge, np.random.default_rng(args.seed + i))
        for pattern in args.patterns:
            for n in args.graded:
                started = time.perf_counter()
                case = replicate(judge, n, pattern, t, args.reps, args.events,
                                 args.seed * 1000 + 100 * i + n + len(pattern))  # fmt: skip
                for m in MEASURES:
                    w, c = case.width(f"{m}.ppi++"), case.width(f"{m}.classical")
                    print(
                        f"{judge.label:7} {pattern:13} {n:6d} {NAMES[m]:7} "
                        f"{case.rate(f'{m}.ppi++'):6.1%} {w:6.3f} {c:6.3f} {w / c:6.2f} "
                        f"{case.rate(f'{m}.classical'):6.1%} "
                        f"{case.width(f'{m}.people'):6.3f} {np.mean(case.flagged):7.1%} "
                        f"{case.rate(f'{m}.bound'):6.1%}",
                        flush=True,
                    )
                print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
