"""What `ragmon calibrate` measures: agreement on the known grades, and each measure per
retriever with the known grades and with the judge's."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ragmon.calibrate.grade import Outcome
from ragmon.core.agreement import (
    PerQuery,
    binary_kappa,
    confusion,
    order_tau,
    tau_with_interval,
    weighted_kappa,
)
from ragmon.core.golden import Record
from ragmon.core.measure_table import MEASURES as TABLE
from ragmon.core.measures import MeasureParams, compute

MEASURES = tuple((m.key, m.name) for m in TABLE if m.calibrate)


def analyse(records: Sequence[Record], outcome: Outcome, params: MeasureParams) -> dict[str, Any]:
    """Agreement and per-retriever measures (a dict, printed by `render`)."""
    known: list[int] = []
    judged: list[int] = []
    unknown = 0
    seen: set[tuple[str, str]] = set()
    per_retriever: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    # measure -> query -> retriever -> (known, judge): on the shared pool, and with every grade
    shared: dict[str, PerQuery] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    every: dict[str, PerQuery] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    complete = 0
    for r in records:
        top = r.passages[: r.depth]
        jg = [outcome.grades.get((r.query, text)) for _, text, _ in top]
        for (_, text, kg), g in zip(top, jg, strict=True):
            if g is None or (r.query, text) in seen:
                continue
            seen.add((r.query, text))
            if kg is None:
                unknown += 1
            else:
                known.append(kg)
                judged.append(g)
        if any(g is None for g in jg):
            continue  # the judge failed on this record: no measures
        complete += 1
        known_top = [kg for _, _, kg in top]
        mk = compute(known_top, r.k, params)
        mj = compute(jg, r.k, params)
        # the shared pool: a passage without a known grade is unjudged on both sides
        ms = compute([g if kg is not None else None for g, kg in zip(jg, known_top, strict=True)],
                     r.k, params)  # fmt: skip
        for key, _ in MEASURES:
            a, b, c = mk[key], mj[key], ms[key]
            if a is not None and b is not None:
                per_retriever[r.retriever][key].append((a, b))
                every[key][r.query][r.retriever].append((a, b))
            if a is not None and c is not None:
                shared[key][r.query][r.retriever].append((a, c))
    matrix = confusion(known, judged)
    n = len(known)
    rel = params.relevant_grade
    result: dict[str, Any] = {
        "pairs": n,
        "judged_without_known": unknown,
        "records_measured": complete,
        "confusion": matrix,
        "kappa_binary": binary_kappa(known, judged, rel),
        "kappa_quadratic": weighted_kappa(matrix, "quadratic"),
        "exact_agreement": sum(matrix[i][i] for i in range(4)) / n if n else math.nan,
        "mean_known": sum(known) / n if n else math.nan,
        "mean_judge": sum(judged) / n if n else math.nan,
        "relevant_known": sum(g >= rel for g in known) / n if n else math.nan,
        "relevant_judge": sum(g >= rel for g in judged) / n if n else math.nan,
        "retrievers": {},
        "tau": {},
        "tau_shared": {},
    }
    names = sorted(per_retriever)
    for key, _ in MEASURES:
        means = {}
        for name in names:
            pairs = per_retriever[name][key]
            if pairs:
                means[name] = (
                    sum(p[0] for p in pairs) / len(pairs),
                    sum(p[1] for p in pairs) / len(pairs),
                    len(pairs),
                )
        result["retrievers"][key] = means
        if len(means) >= 2:
            result["tau"][key] = order_tau(every[key], dict.fromkeys(every[key], 1))
            result["tau_shared"][key] = tau_with_interval(shared[key])
    return result
