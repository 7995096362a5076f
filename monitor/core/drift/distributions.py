"""Reference distributions: Student's t and chi-square tails (no scipy at run time)."""

from __future__ import annotations

import math
from functools import lru_cache

NORMAL_DF = 1e5  # above this many degrees of freedom t is the normal distribution


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) by Lentz's continued fraction (Numerical Recipes)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return front * h / a


def _gammaincc(a: float, x: float) -> float:
    """Regularized upper incomplete gamma Q(a, x): series below a + 1, continued fraction above."""
    if x <= 0.0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return math.exp(log_front) * h


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom (normal above `NORMAL_DF`)."""
    if df > NORMAL_DF:
        return 0.5 * math.erfc(t / math.sqrt(2.0))
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def _t_pdf(t: float, df: float) -> float:
    if df > NORMAL_DF:
        return math.exp(-t * t / 2.0) / math.sqrt(2.0 * math.pi)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))


@lru_cache(maxsize=4096)
def _t_ppf(q: float, df: float) -> float:
    """Newton's method on t_sf(t) = 1 - q, kept inside a bracket that bisection narrows when a
    step leaves it (t_sf is decreasing and convex for t > 0, so Newton converges fast)."""
    target = 1.0 - q
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > target:
        lo, hi = hi, hi * 2.0
    t = (lo + hi) / 2.0
    for _ in range(200):
        f = t_sf(t, df) - target
        if f > 0:
            lo = t
        else:
            hi = t
        step = f / _t_pdf(t, df)
        nxt = t + step
        if not lo < nxt < hi:
            nxt = (lo + hi) / 2.0
        if abs(nxt - t) <= 1e-13 * max(1.0, t) or hi - lo <= 1e-13 * max(1.0, hi):
            return nxt
        t = nxt
    return t


def t_ppf(q: float, df: float) -> float:
    """The t quantile, for q in [0.5, 1) (degrees of freedom rounded down to 0.01: cached)."""
    if not 0.5 <= q < 1.0:
        raise ValueError("q must be in [0.5, 1)")
    return _t_ppf(q, min(math.floor(df * 100) / 100, NORMAL_DF + 1))


def chi2_sf(x: float, df: float) -> float:
    """P(X > x) for a chi-square variable with `df` degrees of freedom."""
    return _gammaincc(df / 2.0, x / 2.0)
