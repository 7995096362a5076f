"""The calibration report as markdown: agreement, confusion matrix, measures per retriever."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ragmon.calibrate.analysis import MEASURES
from ragmon.core.agreement import TAU_BOOTSTRAP, landis_koch


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def render(res: dict[str, Any], head: Sequence[str], relevant_grade: int) -> str:
    lines = list(head)
    lines += [
        "",
        f"## Agreement on {res['pairs']} (query, passage) pairs with a known grade",
        f"({res['judged_without_known']} more were judged but have no known grade)",
        "",
        f"Cohen's kappa, binary (relevant = grade >= {relevant_grade}): "
        f"{_fmt(res['kappa_binary'])}  ({landis_koch(res['kappa_binary'])})",
        f"Cohen's kappa, quadratic-weighted 0-3:        {_fmt(res['kappa_quadratic'])}  "
        f"({landis_koch(res['kappa_quadratic'])})",
        f"exact agreement on 0-3: {_fmt(res['exact_agreement'])}; "
        f"mean grade known {_fmt(res['mean_known'], 2)}, judge {_fmt(res['mean_judge'], 2)}; "
        f"share relevant known {_fmt(res['relevant_known'], 2)}, "
        f"judge {_fmt(res['relevant_judge'], 2)}",
        "",
        "Confusion matrix (rows: known grade, columns: judge grade)",
        "",
        "| known \\ judge | 0 | 1 | 2 | 3 | total |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    m = res["confusion"]
    for i in range(4):
        lines.append(f"| {i} | " + " | ".join(str(x) for x in m[i]) + f" | {sum(m[i])} |")
    cols = [sum(m[i][j] for i in range(4)) for j in range(4)]
    lines.append("| total | " + " | ".join(str(c) for c in cols) + f" | {sum(cols)} |")
    lines += [
        "",
        f"## Measures per retriever ({res['records_measured']} records; mean with known "
        "grades -> mean with the judge's grades)",
        "",
    ]
    retrievers = sorted({r for means in res["retrievers"].values() for r in means})
    lines.append(
        "| measure | " + " | ".join(retrievers) + " | Kendall tau, shared pool [95% CI] | "
        "Kendall tau, every judge grade |"
    )
    lines.append("| --- | " + " | ".join("---" for _ in retrievers) + " | ---: | ---: |")
    for key, label in MEASURES:
        means = res["retrievers"].get(key, {})
        cells = [
            f"{means[r][0]:.3f} -> {means[r][1]:.3f}" if r in means else "n/a" for r in retrievers
        ]
        tau, lo, hi = res["tau_shared"].get(key, (math.nan, math.nan, math.nan))
        shared = f"{_fmt(tau, 2)} [{_fmt(lo, 2)}, {_fmt(hi, 2)}]"
        lines.append(
            f"| {label} | " + " | ".join(cells) + f" | {shared} | {_fmt(res['tau'].get(key), 2)} |"
        )
    lines += [
        "",
        "Kendall tau compares the order of the retrievers by the measure's mean with known grades "
        "and with the judge's: 1 = same order, 0 = unrelated, -1 = reversed. On the shared pool "
        "only passages with a known grade count on both sides (a passage nobody labelled is a gap "
        "in the labels, not a judge error); the interval resamples the queries "
        f"({TAU_BOOTSTRAP} times). The last column uses every judge grade, as ragmon does in "
        "production. With few retrievers tau takes few values and its interval is wide.",
    ]
    return "\n".join(lines)
