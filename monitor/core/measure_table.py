"""Every retrieval-quality measure described once: pure data, no imports from ragmon.

`monitor/core/measures.py` computes them; everything that names, bounds, buckets, explains, ranks or
charts a measure reads this table (the `/metrics` catalog, the API schema, the weekly report,
the calibration, the demo summary, the Grafana generator and docs/metrics.md's table), as
ir_measures keeps one registry of measure descriptions. Adding a measure: one `Measure` row
here and one function in `measures.py` (CONTRIBUTING.md has the steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

INF = math.inf
_UNIT = tuple(round(i / 20, 2) for i in range(21))  # 0, 0.05, ..., 1.0


@dataclass(frozen=True)
class Measure:
    """One measure `compute` returns.

    `buckets` are the fixed histogram upper bounds ("le"): a storage contract (changing them
    breaks stored per-day distributions, so add a new measure rather than edit one); empty
    means the measure is stored with the event but not exported. `panel` is the dashboard's
    one-sentence description for people who are not IR researchers; empty means no panel.
    """

    key: str
    name: str
    lo: float  # the range of values (for the default parameters)
    hi: float
    better: str  # "higher", "lower", or "" (an indicator, not a quality)
    cite: str
    help: str  # the Prometheus HELP line (and the API schema's description)
    buckets: tuple[float, ...] = ()
    panel: str = ""
    title: str = ""  # the dashboard's title when it differs from `name`
    unit: str = "none"  # Grafana unit: "percentunit" for shares
    report: bool = False  # compared in the weekly drift report (one Holm family)
    calibrate: bool = False  # compared with known grades by `ragmon calibrate`
    summary: bool = False  # in the demo's summary table
    needs: str = ""  # the setting without which it is always null (the report then skips it)
    explore: bool = False  # a sort order of the event explorer (an index per series in Redis)
    # The level past which a mean is poor whatever its history: the level alert's line
    # (RagmonHitRateLow, RagmonHarmHigh), which the explorer's overview and the report use too.
    line: float | None = None

    def past_line(self, low: float, high: float) -> str:
        """ "below 0.6" (or "above 0.3") when the interval [low, high] lies wholly past this
        measure's line on its bad side; "" when it does not, or the measure has no line."""
        if self.line is None:
            return ""
        if self.better == "higher":
            return f"below {self.line:g}" if high < self.line else ""
        return f"above {self.line:g}" if low > self.line else ""

    @property
    def histogram(self) -> bool:
        return bool(self.buckets)

    @property
    def dashboard_title(self) -> str:
        return self.title or self.name


_SCHWARTZ = "Schwartz, Vasilyev & Sawaya 2025 (arXiv:2512.20854)"
_DALLAIRE = "Dallaire 2025 (arXiv:2511.09545), §2.4"
_TRAPPOLINI = "Trappolini, Cuconasu et al. 2025 (arXiv:2510.21440)"

# In the order `compute` returns them.
MEASURES: tuple[Measure, ...] = (
    Measure(
        "t", "T", -1.0, INF, "higher", f"{_SCHWARTZ}, eq. 3",
        "T (Schwartz et al.): (1-a)*relevant - a*non-relevant/K in the top K; higher is better.",
        # the three lowest follow RAGMON_T_ALPHA (measures.histogram_bounds); here for a = 0.5
        buckets=(-0.5, -0.25, -0.125, 0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.5,
                 10.0, 15.0, 20.0, 30.0, 50.0),
        panel="Relevant passages that reached the prompt minus a penalty for the irrelevant ones "
        "around them (Schwartz et al.); higher is better and its scale grows with K.",
        report=True, calibrate=True, summary=True, explore=True,
    ),
    Measure(
        "ndcg", "nDCG@K", 0.0, 1.0, "higher", "Järvelin & Kekäläinen, TOIS 2002",
        "nDCG@K: graded, rank-discounted gain of the top K against the ideal order of the "
        "judged pool; 1 is perfect.",
        buckets=_UNIT,
        panel="How close the prompt's passages are to the best possible order of the passages "
        "judged for the query: 1 = the most relevant ones came first, 0 = none of the top K is "
        "relevant.",
        report=True, calibrate=True, summary=True, explore=True,
    ),
    Measure(
        "f_e", "F_e", 0.0, 1.0, "higher", f"{_SCHWARTZ} (F with N_p estimated)",
        "F_e: F-measure of the top K with the number of relevant passages estimated from the "
        "top 2K; needs 2K passages.",
        buckets=_UNIT,
        panel="Balance of finding the relevant passages and not padding the prompt with others, "
        "with the number of relevant passages estimated from the top 2K; 1 is perfect.",
        report=True, calibrate=True, summary=True, explore=True,
    ),
    Measure(
        "harm", "Harm@K", 0.0, 1.0, "lower", f"Dallaire (Harm@K); {_TRAPPOLINI}",
        "Harm@K: share of the top K that are distractors (on-topic passages that do not "
        "answer); lower is better.",
        buckets=_UNIT,
        panel="Share of the prompt taken by distractors: passages on the topic that do not "
        "answer and can mislead the LLM; lower is better.",
        unit="percentunit", report=True, calibrate=True, summary=True, explore=True, line=0.3,
    ),
    Measure(
        "precision", "P@K", 0.0, 1.0, "higher", "",
        "P@K: share of the top K that are relevant.",
        buckets=_UNIT,
        panel="Share of the passages put in the prompt that are relevant to the query.",
        title="Precision@K", unit="percentunit", report=True, calibrate=True, summary=True,
        explore=True,
    ),
    Measure(
        "hit", "Hit@K", 0.0, 1.0, "higher", "",
        "Hit@K: 1 when at least one relevant passage is in the top K.",
        buckets=(0.0, 1.0),
        panel="Share of queries with at least one relevant passage in the prompt; a miss means "
        "the LLM had nothing to answer from.",
        title="Hit rate", unit="percentunit", report=True, calibrate=True, explore=True,
        line=0.6,
    ),
    Measure(
        "rr", "RR@K", 0.0, 1.0, "higher", "",
        "RR@K: 1 / rank of the first relevant passage in the top K, 0 if none.",
        buckets=(0.0, 0.1, 0.125, 0.143, 0.167, 0.2, 0.25, 0.334, 0.5, 1.0),
        calibrate=True,
    ),
    Measure(
        "k_over_np", "K/N̂_p", 0.0, INF, "", f"{_SCHWARTZ}, conclusions",
        "K / estimated number of relevant passages: below 1 trust T, well above 1 trust nDCG.",
        buckets=(0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0),
        title="K/N̂p",
    ),
    Measure(
        "f", "F", 0.0, 1.0, "higher", f"{_SCHWARTZ}",
        "F: F-measure of the top K with a known number of relevant passages (relevant_total).",
    ),
    Measure(
        "recall", "R@K", 0.0, 1.0, "higher", "",
        "R@K: share of the relevant passages (relevant_total) in the top K.",
    ),
    Measure(
        "judged_at_k", "judged@K", 0.0, 1.0, "higher", "",
        "Share of the top K's distinct passages that have a grade (judge coverage); a passage "
        "the judge could not grade scores as not relevant.",
        buckets=_UNIT,
        panel="How much of what each retriever put in the prompt the judge could grade: below 1, "
        "the judge refused or failed on some passages, which then count as not relevant.",
        title="Judge coverage (judged@K)",
        unit="percentunit",
    ),
    Measure(
        "udcg", "UDCG", 0.0, 1.0, "higher", f"{_TRAPPOLINI}, eq. 2 and 4",
        "UDCG (Trappolini et al.): sigmoid of the mean utility of the top K, relevant passages "
        "the LLM answers from count +, distractors it answers from count -1/3; needs "
        "RAGMON_UTILITY=on.",
        # In [sigmoid(-1/3), sigmoid(1)] = [0.417, 0.731]: finer bounds where it lives.
        buckets=(0.42, 0.45, 0.475, 0.5, 0.525, 0.55, 0.575, 0.6, 0.625, 0.65, 0.675, 0.7, 0.74),
        panel="How much the prompt's passages help the LLM answer, counting passages it answers "
        "from wrongly against it (Trappolini et al.); 0.5 = no effect, higher is better; needs "
        "RAGMON_UTILITY=on.",
        report=True, needs="RAGMON_UTILITY=on",
    ),
    Measure(
        "ra_nwg", "RA-nWG@K", 0.0, 1.0, "higher", _DALLAIRE,
        "RA-nWG@K (Dallaire): rarity-weighted utility of the top K over the best K of the "
        "judged pool, on the 1-5 utility scale; 1 is the pool's best.",
        buckets=_UNIT,
        panel="Share of the best evidence among the judged passages that made it into the "
        "prompt, a scarce 'answers clearly' passage weighing most (Dallaire); 1 is the best "
        "possible.",
        report=True, calibrate=True, explore=True,
    ),
    Measure(
        "n_recall4", "N-Recall4+@K", 0.0, 1.0, "higher", _DALLAIRE,
        "N-Recall4+@K: share of the pool's grade-4+ (1-5 scale) passages the top K holds, out "
        "of at most K.",
        buckets=_UNIT,
        panel="Share of the highly relevant passages among those judged that made it into the "
        "prompt (at most K counted).",
        unit="percentunit", report=True, calibrate=True,
    ),
    Measure(
        "precision4", "Precision4+@K", 0.0, 1.0, "higher", _DALLAIRE,
        "Precision4+@K: share of the top K graded 4+ on the 1-5 utility scale.",
        buckets=_UNIT,
        panel="Share of the prompt's passages that are highly relevant (grade 4 or 5 on the 1-5 "
        "utility scale).",
        unit="percentunit", calibrate=True,
    ),
    Measure(
        "n_recall5", "N-Recall5@K", 0.0, 1.0, "higher", _DALLAIRE,
        "N-Recall5@K: share of the pool's grade-5 (1-5 scale) passages the top K holds, out of "
        "at most K.",
        buckets=_UNIT,
        panel="Share of the passages that answer the query clearly, among those judged, that "
        "made it into the prompt (at most K counted).",
        unit="percentunit", calibrate=True,
    ),
    # The pooled ideal: the same measures against every passage ragmon has graded for the
    # query (across retrievers and time), so that a retriever that stops finding the relevant
    # passages falls instead of being measured against what it still finds.
    Measure(
        "ndcg_pooled", "nDCG@K (pooled)", 0.0, 1.0, "higher",
        "Järvelin & Kekäläinen, TOIS 2002; pooling as in TREC (Voorhees & Harman 2005)",
        "nDCG@K against the pooled ideal: the best grades ragmon has seen for the query "
        "across retrievers and time (per app); falls when relevant passages stop being found.",
        buckets=_UNIT,
        panel="How close the prompt's passages are to the best ones ragmon has ever seen for the "
        "query, from any retriever: unlike nDCG@K it falls when a retriever stops finding the "
        "relevant passages; 1 is the best ever seen.",
        title="nDCG@K against the pooled ideal", report=True,
    ),
    Measure(
        "ra_nwg_pooled", "RA-nWG@K (pooled)", 0.0, 1.0, "higher", f"{_DALLAIRE}; pooled ideal",
        "RA-nWG@K over the pooled ideal: the best grades ragmon has seen for the query across "
        "retrievers and time (per app), on the 1-5 utility scale.",
        buckets=_UNIT,
        panel="Share of the best evidence ragmon has ever seen for the query, from any "
        "retriever, that made it into the prompt (Dallaire's rarity weights); falls when a "
        "retriever stops finding it.",
        title="RA-nWG@K against the pooled ideal", report=True,
    ),
    Measure(
        "n_recall4_pooled", "N-Recall4+@K (pooled)", 0.0, 1.0, "higher",
        f"{_DALLAIRE}; pooled ideal",
        "N-Recall4+@K over the pooled ideal: share of the grade-4+ passages ragmon has seen "
        "for the query (out of at most K) that the top K holds.",
        buckets=_UNIT, unit="percentunit",
    ),
)  # fmt: skip

BY_KEY: dict[str, Measure] = {m.key: m for m in MEASURES}
