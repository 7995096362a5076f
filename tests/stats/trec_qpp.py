"""How well the score signals predict judged nDCG@10, on the five TREC DL retrievers.

    python -m tests.stats.trec_qpp [--data ../shared/data/trec-dl]   (or TREC_DL_DIR=...)
    python -m tests.stats.trec_qpp --spread   # each signal's spread, and r with the top score

Each record of `trec-dl-top20.jsonl` is one event as ragmon sees it online: a retriever's top
20 with its scores, K = 10. Per event, the predictors of `ragmon.core.signals` (NQC, WIG, the
top score, the top-1 minus top-10 gap; WIG also as if the app had sent only its top 10), and
two judged nDCG@10: ragmon's (exponential gain, the event's judged top 20 as the ideal, NIST's
grades) and trec_eval's (linear gain, all of NIST's judgments for the query as the ideal,
`pytrec_eval-expected.json`). Prints, per run and pooled over all 485 events, Pearson's r with
its 95 % interval (Fisher's z) and Kendall's tau-b of each predictor with each nDCG.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragmon.core.agreement import kendall_tau
from ragmon.core.measures import compute
from ragmon.core.signals import extract, wig

K = 10
DEFAULT_DATA = Path(
    os.environ.get("TREC_DL_DIR")
    or Path(__file__).resolve().parents[3] / "shared" / "data" / "trec-dl"
)
SHORT = {"trec-dl19-passage": "dl19", "trec-dl20-passage": "dl20"}
Z95 = 1.959963984540054

Predictor = Callable[[dict[str, Any]], float | None]


def _signal(key: str) -> Predictor:
    def value(r: dict[str, Any]) -> float | None:
        hits = r["hits"]
        return extract(
            r["query"], K, [h["docid"] for h in hits], [h["score"] for h in hits]
        ).values[key]

    return value


PREDICTORS: tuple[tuple[str, Predictor], ...] = (
    ("NQC", _signal("qpp_nqc")),
    ("WIG", _signal("qpp_wig")),
    ("WIG, top 10 sent", lambda r: wig([h["score"] for h in r["hits"][:K]], K)),
    ("top score", _signal("top_score")),
    ("top-1 minus top-10", _signal("score_gap")),
)
TARGETS = ("ragmon", "trec_eval")


def load(data: Path) -> list[dict[str, Any]]:
    with (data / "trec-dl-top20.jsonl").open() as f:
        records = [json.loads(line) for line in f]
    expected = json.loads((data / "pytrec_eval-expected.json").read_text())
    for r in records:
        r["ndcg"] = {
            "ragmon": compute([h["grade"] for h in r["hits"]], K)["ndcg"],
            "trec_eval": expected[f"{SHORT[r['collection']]}/{r['run']}"]["relevance_level_1"][
                r["qid"]
            ]["ndcg_cut_10"],
        }
    return records


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def fisher_interval(r: float, n: int) -> tuple[float, float]:
    """The 95 % interval of Pearson's r by Fisher's z (n > 3)."""
    if n <= 3 or not -1 < r < 1:
        return (math.nan, math.nan)
    z, se = math.atanh(r), 1 / math.sqrt(n - 3)
    return (math.tanh(z - Z95 * se), math.tanh(z + Z95 * se))


@dataclass(frozen=True)
class Cell:
    """One predictor against one nDCG over one set of events."""

    n: int
    r: float
    low: float
    high: float
    tau: float

    def text(self) -> str:
        return f"{self.r:+.2f} [{self.low:+.2f}, {self.high:+.2f}], τ {self.tau:+.2f}"


def cell(records: list[dict[str, Any]], predictor: Predictor, target: str) -> Cell:
    pairs = [(x, r["ndcg"][target]) for r in records if (x := predictor(r)) is not None]
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    r = pearson(xs, ys)
    return Cell(len(pairs), r, *fisher_interval(r, len(pairs)), kendall_tau(xs, ys))


def groups(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`dl19 BM25` ... -> its events, then `pooled` -> all of them."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        out[f"{SHORT[r['collection']]} {r['run']}"].append(r)
    return {**dict(sorted(out.items())), "pooled": records}


def table(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Cell]]]:
    """target -> group -> predictor -> cell."""
    return {
        target: {
            name: {p: cell(rs, f, target) for p, f in PREDICTORS}
            for name, rs in groups(records).items()
        }
        for target in TARGETS
    }


def render(cells: dict[str, dict[str, dict[str, Cell]]]) -> str:
    lines = []
    for target, rows in cells.items():
        lines.append(f"\n#### nDCG@10 ({target}): Pearson r [95 % interval], Kendall τ-b\n")
        lines.append("| run | queries | " + " | ".join(p for p, _ in PREDICTORS) + " |")
        lines.append("| --- | --- |" + " --- |" * len(PREDICTORS))
        for name, row in rows.items():
            n = max(c.n for c in row.values())
            lines.append(f"| {name} | {n} | " + " | ".join(c.text() for c in row.values()) + " |")
    return "\n".join(lines)


def spread(records: list[dict[str, Any]]) -> str:
    """Per run: each signal's spread over queries (SD / mean: the events an hour's mean needs
    to see a given relative change grow with its square), and Pearson's r of the score gap and
    NQC with the top score (why no alert of their own: docs/signals.md)."""
    lines = ["| run | SD / mean: top score | gap | NQC | r(gap, top) | r(NQC, top) |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, rs in groups(records).items():
        if name == "pooled":
            continue
        top, gap, nqc = ([_signal(k)(r) for r in rs] for k in ("top_score", "score_gap", "qpp_nqc"))
        cv = [statistics.pstdev(v) / abs(statistics.fmean(v)) for v in (top, gap, nqc)]  # type: ignore[arg-type]
        lines.append(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cv)
                     + f" | {pearson(gap, top):.2f} | {pearson(nqc, top):.2f} |")  # type: ignore[arg-type]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--spread", action="store_true", help="the signals' spread per run")
    args = parser.parse_args(argv)
    records = load(args.data)
    print(spread(records) if args.spread else render(table(records)))


if __name__ == "__main__":
    main()
