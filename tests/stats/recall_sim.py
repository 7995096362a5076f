"""Recall loss against the pooled ideal: does a retriever that stops finding the relevant
passages of some queries move the measures? (issue 34 item 4)

Each query has a fixed candidate set (its grades: `traffic.POOLS` by segment) and the retriever
a fixed ranking of it per query (score = grade + noise * z, z fixed per query and candidate:
the same query always gets the same top 2K). ragmon keeps, per query, the best grade of every
passage it has judged (`pool`): here the candidates any event of the query showed so far.
A week is `per_week` events of queries drawn from `queries` recurring ones; the store's pool
starts warm (a `warm` week before the baseline) or cold.

Scenario "recall loss": in the current week, `lost` of the queries (drawn per replication) lose
every relevant passage (grade >= 2): the retriever ranks the remaining candidates. Per measure:
the mean change this week vs the baseline, its standard error (clustered by query, as the report
does), and the share of replications where the change exceeds one and two standard errors.

    nice python -m tests.stats.recall_sim --reps 200
"""

from __future__ import annotations

import argparse
import zlib
from dataclasses import dataclass

import numpy as np

from ragmon.core.measures import MeasureParams, compute
from tests.stats.traffic import POOLS

K = 10
PARAMS = MeasureParams()
SHOWN = ("hit", "precision", "ndcg", "ndcg_pooled", "ra_nwg", "ra_nwg_pooled", "n_recall4",
         "n_recall4_pooled")  # fmt: skip
SEGMENTS = ("default", "howto", "billing", "sharp")


@dataclass(frozen=True)
class Setup:
    per_week: int = 500
    queries: int = 300  # recurring questions
    noise: float = 5.0
    lost: float = 0.3  # share of queries that lose every relevant passage this week
    warm: bool = True  # the pool has seen a week of traffic before the baseline
    retrievers: int = 1  # retrievers sharing the queries (each with its own noise draw)


def ranking(grades: np.ndarray, z: np.ndarray, noise: float, drop_relevant: bool) -> list[int]:
    """Candidate indexes of the top 2K, best first."""
    keep = np.arange(len(grades))
    if drop_relevant:
        keep = keep[grades < PARAMS.relevant_grade]
    order = np.argsort(-(grades[keep] + noise * z[keep]), kind="stable")
    return keep[order][: 2 * K].tolist()


def week(rng, s: Setup, qgrades, qz, pools, lost: set[int]) -> dict[str, list]:
    """Judge `per_week` events in time order; the pools grow as they go. Per measure, the
    values (NaN when undefined) and the query of each event."""
    out: dict[str, list] = {m: [] for m in SHOWN}
    out["query"] = []
    for _ in range(s.per_week):
        q = int(rng.integers(0, s.queries))
        r = int(rng.integers(0, s.retrievers))
        idx = ranking(qgrades[q], qz[q][r], s.noise, q in lost)
        grades = [int(qgrades[q][i]) for i in idx]
        pool = pools.setdefault(q, {})
        for i, g in zip(idx, grades, strict=True):
            pool[i] = max(pool.get(i, g), g)
        values = compute(grades, K, PARAMS, pool=list(pool.values()))
        for m in SHOWN:
            v = values[m]
            out[m].append(np.nan if v is None else v)
        out["query"].append(q)
    return out


def clustered_se(values: np.ndarray, clusters: np.ndarray) -> tuple[float, float]:
    """Mean and its cluster-robust standard error (CR1) over the defined values."""
    ok = ~np.isnan(values)
    v, c = values[ok], clusters[ok]
    n = len(v)
    if n < 2:
        return float("nan"), float("nan")
    mean = v.mean()
    sums = np.bincount(np.unique(c, return_inverse=True)[1], weights=v - mean)
    g = len(sums)
    var = (sums**2).sum() / n**2 * g / max(g - 1, 1)
    return float(mean), float(np.sqrt(var))


def one(s: Setup, rng: np.random.Generator) -> dict[str, tuple[float, float, float, float]]:
    segs = rng.choice(len(SEGMENTS), size=s.queries)
    qgrades = [np.array(POOLS[SEGMENTS[i]]) for i in segs]
    qz = [rng.standard_normal((s.retrievers, len(g))) for g in qgrades]
    pools: dict[int, dict[int, int]] = {}
    if s.warm:
        week(rng, s, qgrades, qz, pools, set())
    base = week(rng, s, qgrades, qz, pools, set())
    lost = set(np.flatnonzero(rng.random(s.queries) < s.lost).tolist())
    cur = week(rng, s, qgrades, qz, pools, lost)
    out = {}
    for m in SHOWN:
        mb, sb = clustered_se(np.array(base[m]), np.array(base["query"]))
        mc, sc = clustered_se(np.array(cur[m]), np.array(cur["query"]))
        defined_b = float(np.mean(~np.isnan(base[m])))
        defined_c = float(np.mean(~np.isnan(cur[m])))
        out[m] = (mc - mb, float(np.hypot(sb, sc)), defined_b, defined_c)
    return out


def run(s: Setup, reps: int, seed: int = 0) -> dict[str, dict[str, float]]:
    rows: dict[str, list] = {m: [] for m in SHOWN}
    for i in range(reps):
        rng = np.random.default_rng([seed, i, zlib.crc32(repr(s).encode())])
        for m, x in one(s, rng).items():
            rows[m].append(x)
    table = {}
    for m, xs in rows.items():
        a = np.array(xs)
        d, se = a[:, 0], a[:, 1]
        table[m] = {
            "change": float(np.mean(d)),
            "se": float(np.mean(se)),
            "beyond_1se": float(np.mean(np.abs(d) > se)),
            "down_2se": float(np.mean(d < -2 * se)),
            "defined_base": float(np.mean(a[:, 2])),
            "defined_cur": float(np.mean(a[:, 3])),
        }
    return table


def render(s: Setup, reps: int, table: dict[str, dict[str, float]]) -> str:
    head = (f"{reps} replications, {s.per_week} events a week from {s.queries} queries, "
            f"{s.retrievers} retriever(s), noise {s.noise:g}, lost {s.lost:.0%}, "
            f"pool {'warm' if s.warm else 'cold'}")  # fmt: skip
    lines = [head, "",
             "| measure | change | SE | |change| > SE | falls > 2 SE | defined (base → cur) |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for m, r in table.items():
        lines.append(
            f"| `{m}` | {r['change']:+.3f} | {r['se']:.3f} | {r['beyond_1se']:.1%} | "
            f"{r['down_2se']:.1%} | {r['defined_base']:.0%} → {r['defined_cur']:.0%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--per-week", type=int, default=500)
    ap.add_argument("--lost", type=float, default=0.3)
    ap.add_argument("--cold", action="store_true", help="no warm-up week before the baseline")
    ap.add_argument("--retrievers", type=int, default=1)
    ap.add_argument("--noise", type=float, default=Setup.noise)
    a = ap.parse_args(argv)
    s = Setup(a.per_week, noise=a.noise, lost=a.lost, warm=not a.cold, retrievers=a.retrievers)
    print(render(s, a.reps, run(s, a.reps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
