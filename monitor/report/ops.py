"""Volume, K, the K/N̂_p regime, the judge's grade mix, and judge cost per window."""

from __future__ import annotations

from dataclasses import dataclass, field

from ragmon.core import drift
from ragmon.core.measures import BUCKETS
from ragmon.core.wire import field_parts
from ragmon.report.compare import Group, group_hist, group_of
from ragmon.report.gather import WindowData
from ragmon.store.fields import Name

GRADES = (0, 1, 2, 3)


@dataclass
class Ops:
    """One group's operational figures in one window."""

    events: int = 0
    k_sum: int = 0
    grades: tuple[int, int, int, int] = (0, 0, 0, 0)
    regime_n: int = 0  # events where K/N̂_p could be computed
    regime_below: int = 0  # of which K/N̂_p <= 1 (T tracks answer quality best)

    @property
    def k_mean(self) -> float | None:
        return self.k_sum / self.events if self.events else None

    @property
    def below_share(self) -> float | None:
        return self.regime_below / self.regime_n if self.regime_n else None

    @property
    def regime(self) -> str:
        share = self.below_share
        if share is None:
            return "unknown"
        return "K ≤ N̂_p (T is the better guide)" if share > 0.5 else "K > N̂_p (nDCG is)"


@dataclass
class OpsRow:
    group: Group
    base: Ops
    cur: Ops

    @property
    def volume_ratio(self) -> float | None:
        return self.cur.events / self.base.events if self.base.events else None

    @property
    def grade_psi(self) -> float | None:
        if sum(self.base.grades) and sum(self.cur.grades):
            return drift.psi(self.base.grades, self.cur.grades)
        return None

    @property
    def k_changed(self) -> bool:
        kb, kc = self.base.k_mean, self.cur.k_mean
        return bool(kb and kc and abs(kc - kb) / kb > 0.1)

    @property
    def regime_changed(self) -> bool:
        return "unknown" not in (self.base.regime, self.cur.regime) and (
            self.base.regime != self.cur.regime
        )


def group_ops(w: WindowData, group: Group) -> Ops:
    ops = Ops()
    grades = [0, 0, 0, 0]
    for key, value in w.counters.items():
        parts = field_parts(key)
        if len(parts) < 5 or group_of(parts[1:4]) != group:
            continue
        if parts[0] == Name.EVENTS:
            ops.events += int(value)
        elif parts[0] == Name.K_SUM:
            ops.k_sum += int(value)
        elif parts[0] == Name.GRADES and len(parts) == 6 and parts[5].isdigit():
            grades[int(parts[5])] += int(value)
    ops.grades = tuple(grades)  # type: ignore[assignment]
    h = group_hist(w.hists, "k_over_np", group)
    if h is not None and h.count:
        bounds = BUCKETS["k_over_np"]
        ops.regime_n = h.count
        ops.regime_below = sum(c for c, b in zip(h.buckets, bounds, strict=False) if b <= 1.0)
    return ops


@dataclass
class JudgeOps:
    """Judge spend and cache use in one window; None where the workers did not record it."""

    cost_usd: dict[str, float] | None
    tokens: dict[str, float] | None
    cache_hits: int | None
    cache_misses: int | None
    sources: dict[str, int] = field(default_factory=dict)  # grades by source: judge, cache, known
    models: dict[str, int] = field(default_factory=dict)  # judge and cache grades by judge identity

    @property
    def lexical_only(self) -> bool:
        """Every judged grade came from the lexical judge, which runs locally for free."""
        return bool(self.models) and set(self.models) == {"lexical"}

    @property
    def known_only(self) -> bool:
        """Every grade was sent by the app: the judge never had to grade."""
        return bool(self.sources) and set(self.sources) == {"known"}

    @property
    def hit_ratio(self) -> float | None:
        if self.cache_hits is None or self.cache_misses is None:
            return None
        total = self.cache_hits + self.cache_misses
        return self.cache_hits / total if total else None

    @property
    def total_cost(self) -> float | None:
        return sum(self.cost_usd.values()) if self.cost_usd is not None else None


def judge_ops(w: WindowData) -> JudgeOps:
    cost: dict[str, float] = {}
    tokens: dict[str, float] = {}
    for key, value in w.counters.items():
        parts = field_parts(key)
        if parts[0] == "judge_cost_usd" and len(parts) >= 2:
            cost[parts[1]] = cost.get(parts[1], 0.0) + float(value)
        elif parts[0] == "judge_tokens" and len(parts) >= 3:
            key = f"{parts[1]} {parts[2]}"
            tokens[key] = tokens.get(key, 0.0) + float(value)
    hits = w.counters.get("judge_cache_hits")
    misses = w.counters.get("judge_cache_misses")
    recorded = hits is not None or misses is not None
    return JudgeOps(
        cost or None,
        tokens or None,
        int(hits or 0) if recorded else None,
        int(misses or 0) if recorded else None,
        dict(w.sources),
        dict(w.judges),
    )
