"""Do the intervals of human-graded corrections and of judge agreement cover? Simulated windows
of judged events, a random few graded by people, through `ragmon.core.corrected` and
`ragmon.core.agreement` as the service calls them.

    nice python -m tests.stats.anchor_sim              # 500 replications per case (~30 min)
    nice python -m tests.stats.anchor_sim --reps 100   # quicker, noisier

Model. A window has `--events` judged events of K = 5 passages. A passage's latent relevance is
a rank effect plus the event's quality (shared by its passages: grades of one event move
together) plus its own noise; people's grade is the latent cut at three thresholds (53 % grade
0, 22 % 1, 15 % 2, 10 % 3). The judge sees the latent plus its own error (an event-level part
and a passage-level part) plus a shift, cut at the same thresholds: good (quadratic kappa 0.80),
noisy (0.41) and biased (+0.5 grade on average). People grade every passage of events drawn
uniformly at random among the judged ones, as the review page draws them: 50, 200 and 1,000
passages are 10, 40 and 200 events. The "unequal inclusion" cases judge good events always and
poor ones (quality below average) with probability 0.2, weighting by 1 / probability.

Prints, per case and measure: how often the 95 % intervals (corrected and people-only) hold the
true mean, their mean widths, how often the corrected one is wider (never, by construction), and
the effective-label gain, both as `ppi_mean` reports it (mean of effective labels / labels) and
as realised (variance of the people-only estimates / variance of the corrected ones over the
replications). Then the agreement intervals' coverage.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ragmon.core.agreement import GRADES, confusion, paired_agreement, weighted_kappa
from ragmon.core.corrected import GradedEvent, Units, event_units, passage_units, ppi_mean
from ragmon.core.drift import Interval

K = 5
CUTS = np.array([0.6, 1.4, 2.2])  # latent -> grade 0-3
RANK = 1.0 - 0.25 * np.arange(K)  # better passages first
EVENT_SD = 0.8  # the event's quality: its passages' grades move together
MEASURES = ("precision", "ndcg", "hit")
NAMES = {"precision": "P@K", "ndcg": "nDCG@K", "hit": "Hit@K"}
PASSAGES = (50, 200, 1000)


@dataclass(frozen=True)
class Judge:
    name: str
    noise: float  # sd of its passage-level error; its event-level error has half of it
    shift: float  # added to the latent: over-grading
    unequal: bool = False  # poor events judged with probability 0.2 (weights 1 / probability)

    @property
    def label(self) -> str:
        return self.name + (", unequal inclusion" if self.unequal else "")


JUDGES = (
    Judge("good", 0.62, 0.0),
    Judge("noisy", 1.9, 0.0),
    Judge("biased", 0.6, 0.66),
    Judge("good", 0.62, 0.0, unequal=True),
)


def _cut(z: np.ndarray) -> np.ndarray:
    return np.searchsorted(CUTS, z)


@dataclass
class Window:
    human: np.ndarray  # (events, K) people's grades
    judge: np.ndarray  # (events, K) the judge's
    weight: np.ndarray  # (events,) 1 / probability of being judged


def window(rng: np.random.Generator, judge: Judge, events: int) -> Window:
    """The judged events of one window (with unequal inclusion: about `events` of them)."""
    total = int(events / 0.6) if judge.unequal else events  # 0.6 = the mean inclusion
    q = rng.normal(0.0, EVENT_SD, (total, 1))
    latent = RANK + q + rng.normal(0.0, 1.0, (total, K))
    error = rng.normal(0.0, judge.noise / 2, (total, 1)) + rng.normal(0.0, judge.noise, (total, K))
    prob = np.where(q[:, 0] < 0, 0.2, 1.0) if judge.unequal else np.ones(total)
    kept = rng.random(total) < prob
    return Window(_cut(latent)[kept], _cut(latent + judge.shift + error)[kept], 1 / prob[kept])


def graded_events(w: Window, sample: np.ndarray) -> list[GradedEvent]:
    """Every judged event, with people's grades on the sampled ones."""
    none = [None] * K
    return [
        GradedEvent(w.judge[i].tolist(), w.human[i].tolist() if s else none, K, float(w.weight[i]))
        for i, s in enumerate(sample)
    ]


def units_of(events: list[GradedEvent], measure: str) -> Units:
    return passage_units(events) if measure == "precision" else event_units(events, measure)


@dataclass(frozen=True)
class Truth:
    means: dict[str, float]  # people's mean of each measure over all traffic
    exact: float
    kappa: float
    difference: float
    shares: np.ndarray  # [h][j]


def truth(judge: Judge, rng: np.random.Generator, events: int = 200_000) -> Truth:
    """The population values, from one large window with every event graded by people."""
    w = window(rng, Judge(judge.name, judge.noise, judge.shift), events)  # all traffic
    everyone = [
        GradedEvent(j.tolist(), h.tolist(), K) for h, j in zip(w.human, w.judge, strict=True)
    ]
    means = {}
    for m in MEASURES:
        u = units_of(everyone, m)
        means[m] = float(np.average(u.human, weights=u.weights) * u.scale)
    # agreement is over the passages people grade: those of judged events, unweighted
    w = window(rng, judge, events)
    h, j = w.human.ravel(), w.judge.ravel()
    c = np.array(confusion(h.tolist(), j.tolist(), GRADES), float)
    return Truth(
        means, float((h == j).mean()), weighted_kappa(c.tolist(), "quadratic"),
        float((j - h).mean()), c / c.sum(axis=1, keepdims=True),
    )  # fmt: skip


def _holds(i: Interval | None, value: float) -> bool | None:
    return None if i is None else i.low <= value <= i.high


@dataclass
class Tally:
    """One case's outcomes over the replications."""

    covered: dict[str, list[bool]] = field(default_factory=dict)
    widths: dict[str, list[float]] = field(default_factory=dict)
    values: dict[str, list[float]] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, i: Interval | None, value: float) -> None:
        if i is None:
            self.missing[key] = self.missing.get(key, 0) + 1
            return
        self.covered.setdefault(key, []).append(i.low <= value <= i.high)
        self.widths.setdefault(key, []).append(i.high - i.low)
        self.values.setdefault(key, []).append(i.estimate)

    def note(self, key: str, value: float) -> None:
        self.values.setdefault(key, []).append(value)

    def rate(self, key: str) -> float:
        xs = self.covered.get(key, [])
        return float(np.mean(xs)) if xs else float("nan")

    def width(self, key: str) -> float:
        xs = self.widths.get(key, [])
        return float(np.mean(xs)) if xs else float("nan")

    def mean(self, key: str) -> float:
        xs = self.values.get(key, [])
        return float(np.mean(xs)) if xs else float("nan")

    def var(self, key: str) -> float:
        xs = self.values.get(key, [])
        return float(np.var(xs)) if len(xs) > 1 else float("nan")


def replicate(
    judge: Judge, passages: int, t: Truth, reps: int, events: int, seed: int,
    progress: Callable[[str], None] | None = None,
) -> Tally:  # fmt: skip
    rng = np.random.default_rng(seed)
    out = Tally()
    for r in range(reps):
        w = window(rng, judge, events)
        sample = np.zeros(len(w.weight), bool)
        sample[rng.choice(len(sample), passages // K, replace=False)] = True
        graded = graded_events(w, sample)
        for m in MEASURES:
            got = ppi_mean(units_of(graded, m))
            out.add(f"{m}.ppi", got.estimate, t.means[m])
            out.add(f"{m}.human", got.human_only, t.means[m])
            if got.estimate and got.human_only:
                wider = (
                    got.estimate.high - got.estimate.low > got.human_only.high - got.human_only.low
                )
                out.note(f"{m}.wider", float(wider))
                out.note(f"{m}.gain", (got.effective_labels or 0.0) / got.labels)
                out.note(f"{m}.judge_error", (got.judge_only or 0.0) - t.means[m])
        h, j = w.human[sample].ravel(), w.judge[sample].ravel()
        a = paired_agreement(h.tolist(), j.tolist(), np.repeat(np.arange(sample.sum()), K).tolist())
        out.add("exact", a.exact, t.exact)
        out.add("kappa", a.kappa, t.kappa)
        out.add("difference", a.difference, t.difference)
        for x in range(GRADES):
            for y in range(GRADES):
                if a.exact is not None:  # shares are given with the rest
                    out.add(f"share{x}{y}", a.shares[x][y], float(t.shares[x, y]))
        if progress and (r + 1) % 100 == 0:
            progress(f"  {judge.label}, {passages} passages: {r + 1}/{reps}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=500, help="replications per case")
    parser.add_argument("--events", type=int, default=2000, help="judged events per window")
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--passages", type=int, nargs="*", default=list(PASSAGES))
    parser.add_argument("--only", help="the judges whose label contains this")
    args = parser.parse_args(argv)
    say = lambda m: print(m, flush=True)  # noqa: E731
    rows = []
    for i, judge in enumerate(JUDGES):
        if args.only and args.only not in judge.label:
            continue
        started = time.perf_counter()
        t = truth(judge, np.random.default_rng(args.seed + 1000 + i))
        say(f"{judge.label}: kappa {t.kappa:.2f}, judge - people {t.difference:+.2f} grade, "
            + ", ".join(f"{NAMES[m]} {v:.3f}" for m, v in t.means.items()))  # fmt: skip
        for n in args.passages:
            tally = replicate(
                judge, n, t, args.reps, args.events, args.seed * 100 + 10 * i + n, say
            )
            rows.append((judge.label, n, tally))
        say(f"  ({time.perf_counter() - started:.0f} s)")
    print()
    print(
        f"{'judge':26} {'passages':>8} {'measure':7} {'cover PPI':>9} {'people':>7} "
        f"{'width PPI':>9} {'people':>7} {'wider':>5} {'gain':>5} {'realised':>8} "
        f"{'judge bias':>10} {'not given':>9}"
    )
    for label, n, tally in rows:
        for m in MEASURES:
            wider = int(sum(tally.values.get(f"{m}.wider", [])))
            realised = tally.var(f"{m}.human") / tally.var(f"{m}.ppi")
            print(
                f"{label:26} {n:8d} {NAMES[m]:7} {tally.rate(f'{m}.ppi'):9.1%} "
                f"{tally.rate(f'{m}.human'):7.1%} {tally.width(f'{m}.ppi'):9.3f} "
                f"{tally.width(f'{m}.human'):7.3f} {wider:5d} {tally.mean(f'{m}.gain'):5.2f} "
                f"{realised:8.2f} {tally.mean(f'{m}.judge_error'):+10.3f} "
                f"{tally.missing.get(f'{m}.ppi', 0):9d}"
            )
    print()
    print(
        f"{'judge':26} {'passages':>8} {'exact':>6} {'kappa':>6} {'diff':>6} {'shares':>6} "
        f"{'worst':>6} {'width kappa':>11} {'not given':>9}"
    )
    for label, n, tally in rows:
        cells = [tally.rate(f"share{x}{y}") for x in range(GRADES) for y in range(GRADES)]
        cells = [c for c in cells if c == c] or [float("nan")]
        print(
            f"{label:26} {n:8d} {tally.rate('exact'):6.1%} {tally.rate('kappa'):6.1%} "
            f"{tally.rate('difference'):6.1%} {np.mean(cells):6.1%} {min(cells):6.1%} "
            f"{tally.width('kappa'):11.3f} {tally.missing.get('kappa', 0):9d}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
