"""This week against the baseline, per (app, index, retriever) and measure: means, CIs, shifts."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from monitor import drift
from monitor.measures import BUCKETS
from monitor.report.gather import Hists, WindowData
from monitor.store import Histogram

# The measures the report compares, with their display names; Harm@K is better when lower.
MEASURES = ("t", "ndcg", "f_e", "harm", "precision", "hit")
NAMES = {
    "t": "T",
    "ndcg": "nDCG@K",
    "f_e": "F_e",
    "harm": "Harm@K",
    "precision": "P@K",
    "hit": "Hit@K",
    "rr": "RR@K",
    "k_over_np": "K/N̂_p",
}
LOWER_IS_BETTER = frozenset({"harm"})
ALPHA = 0.01  # family-wise error rate of one report (Holm over every comparison)
MIN_EFFECT = 0.1  # smallest change, in pooled standard deviations, worth a person's time
BOOTSTRAP_MAX_N = 5000  # above this many events the normal interval equals the bootstrap's
KEPT_SHARE = 0.98  # per-event records must cover this share of the histogram to be used

Group = tuple[str, str, str]  # (app, index, retriever)


def group_of(labels: Sequence[str]) -> Group:
    return (labels[0], labels[1], labels[2])


def group_name(g: Group) -> str:
    return "/".join(g)


@dataclass
class Row:
    """One measure of one group: both windows, their difference and distribution shift."""

    group: Group
    measure: str
    base: drift.Interval | None = None
    cur: drift.Interval | None = None
    diff: drift.Diff | None = None
    p_adj: float | None = None
    psi: float | None = None
    psi_noise: float | None = None
    ks: drift.KSResult | None = None
    base_counts: list[int] | None = None
    cur_counts: list[int] | None = None
    source: str = ""  # "per-event values" or "binned counts"
    status: str = "no data"  # regression | improvement | unchanged | no data

    @property
    def worse(self) -> bool:
        """The difference points the bad way for this measure."""
        if self.diff is None:
            return False
        d = self.diff.estimate
        return d > 0 if self.measure in LOWER_IS_BETTER else d < 0

    @property
    def tested(self) -> drift.Diff:
        """The difference of a row that was tested (both windows had data)."""
        if self.diff is None:
            raise ValueError(f"{self.group} {self.measure}: not tested")
        return self.diff

    @property
    def base_mean(self) -> float | None:
        return self.base.estimate if self.base else None

    @property
    def cur_mean(self) -> float | None:
        return self.cur.estimate if self.cur else None

    @property
    def p(self) -> float:
        """Holm-adjusted p-value (1 when untested)."""
        return 1.0 if self.p_adj is None else self.p_adj

    @property
    def psi_level(self) -> str:
        return drift.psi_level(self.psi) if self.psi is not None else "n/a"


def group_hist(hists: Hists, measure: str, group: Group) -> Histogram | None:
    """The measure's histogram for a group, summed over its segments."""
    series = hists.get(f"retrieval_{measure}", {})
    parts = [h for lbl, h in series.items() if group_of(lbl) == group]
    if not parts:
        return None
    buckets = [sum(col) for col in zip(*(h.buckets for h in parts), strict=True)]
    return Histogram(buckets, sum(h.sum for h in parts), sum(h.count for h in parts))


def segment_hists(hists: Hists, measure: str, group: Group) -> dict[str, Histogram]:
    series = hists.get(f"retrieval_{measure}", {})
    return {lbl[3]: h for lbl, h in series.items() if group_of(lbl) == group and h.count}


def groups_of(*windows: WindowData) -> list[Group]:
    seen: set[Group] = set()
    for w in windows:
        for series in w.hists.values():
            seen.update(group_of(lbl) for lbl, h in series.items() if h.count)
    return sorted(seen)


def _summary(
    values: list[float] | None, hist: Histogram, measure: str, seed: int
) -> tuple[drift.Interval, tuple[float, float, int]]:
    """Interval for one window, and (mean, variance, n) for the difference test."""
    if measure == "hit":
        ones = round(hist.sum)
        n = hist.count
        p = ones / n
        var = p * (1 - p) * n / (n - 1) if n > 1 else 0.0
        return drift.proportion_ci(ones, n), (p, var, n)
    if values is not None:
        mv = drift.mean_var(values)
        ci = (
            drift.mean_ci_bootstrap(values, seed=seed)
            if len(values) <= BOOTSTRAP_MAX_N
            else drift.mean_ci_normal(values)
        )
        return ci, (mv[0], mv[1], len(values))
    mean, var, n = drift.binned_mean_var(hist.buckets, BUCKETS[measure], hist.sum)
    return drift.mean_ci_binned(hist.buckets, BUCKETS[measure], hist.sum), (mean, var, n)


def compare_measure(cur: WindowData, base: WindowData, group: Group, measure: str) -> Row:
    """Means with CIs, Welch difference, PSI on the fixed bins and KS when values are kept."""
    row = Row(group, measure)
    hc = group_hist(cur.hists, measure, group)
    hb = group_hist(base.hists, measure, group)
    seed = zlib.crc32(f"{group_name(group)}:{measure}".encode())
    kept: dict[str, list[float] | None] = {}
    summaries: dict[str, tuple[float, float, int]] = {}
    for key, h, w in (("cur", hc, cur), ("base", hb, base)):
        if h is None or not h.count:
            continue
        vals = w.values.get((group, measure), [])
        complete = KEPT_SHARE * h.count <= len(vals) <= h.count / KEPT_SHARE
        kept[key] = vals if complete else None
        ci, summaries[key] = _summary(kept[key], h, measure, seed)
        setattr(row, key, ci)
        setattr(row, f"{key}_counts", list(h.buckets))
    if row.base is None or row.cur is None or hb is None or hc is None:
        return row
    row.diff = drift.diff_means(summaries["base"], summaries["cur"])
    row.psi = drift.psi(hb.buckets, hc.buckets)
    row.psi_noise = drift.psi_noise(hb.buckets, hc.buckets)
    vb, vc = kept.get("base"), kept.get("cur")
    if vb is not None and vc is not None:
        row.ks = drift.ks_2samp(vb, vc)
        row.source = "per-event values"
    else:
        row.source = "binned counts"
    return row


def compare_all(cur: WindowData, base: WindowData) -> list[Row]:
    """Every (group, measure) row, with Holm-adjusted p-values and a status."""
    rows = [compare_measure(cur, base, g, m) for g in groups_of(cur, base) for m in MEASURES]
    tested = [r for r in rows if r.diff is not None]
    for r, p in zip(tested, drift.holm([r.tested.pvalue for r in tested]), strict=True):
        r.p_adj = p
        big = abs(r.tested.effect) >= MIN_EFFECT
        if p < ALPHA and big:
            r.status = "regression" if r.worse else "improvement"
        else:
            r.status = "unchanged"
    return rows


def severity(row: Row) -> str:
    """major / moderate / minor from the distribution shift (PSI) and the effect size."""
    effect = abs(row.diff.effect) if row.diff else 0.0
    psi = row.psi or 0.0
    if psi > drift.PSI_MAJOR or effect >= 0.5:
        return "major"
    if psi >= drift.PSI_MODERATE or effect >= 0.2:
        return "moderate"
    return "minor"
