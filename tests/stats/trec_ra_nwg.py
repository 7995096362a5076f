"""RA-nWG@10 beside nDCG@10 for the five TREC DL retrievers, with the NIST grades mapped to 1-5.

    python -m tests.stats.trec_ra_nwg [--data ../shared/data/trec-dl]

Each record of `trec-dl-top20.jsonl` is one event as ragmon sees it online: a retriever's top 20
for a query, K = 10, the pool = the graded passages of the top 2K (unjudged ones stay out). The
0-3 grades become 1-5 with ragmon's map (0->1, 1->2, 2->4, 3->5). Prints, per collection, each
retriever's mean nDCG@10 (ragmon's default exponential gain, the pool as ideal), RA-nWG@10,
N-Recall4+@10 and Precision4+@10 over the queries where the measure is defined (RA-nWG and
N-Recall4+ are NA on a query whose pool has no grade 4+), then the order of the retrievers by
each and Kendall's tau-b between the nDCG and RA-nWG orders. A second table takes the pool per
query over all five retrievers (Dallaire's setting: one pool per query), where nDCG's ideal is
that pool too.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from ragmon.core.agreement import kendall_tau
from ragmon.core.measures import compute
from ragmon.core.utility_measures import utility_grades

K = 10
MEASURES = (("ndcg", "nDCG@10"), ("ra_nwg", "RA-nWG@10"), ("n_recall4", "N-Recall4+@10"),
            ("precision4", "Precision4+@10"))  # fmt: skip
DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "trec-dl"


def load(data: Path) -> list[dict[str, Any]]:
    with (data / "trec-dl-top20.jsonl").open() as f:
        return [json.loads(line) for line in f]


def query_pools(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, int]]:
    """(collection, qid) -> docid -> grade over every retriever's judged top 2K."""
    pools: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for r in records:
        for h in r["hits"][: 2 * K]:
            if h["grade"] is not None:
                pools[r["collection"], r["qid"]][h["docid"]] = h["grade"]
    return pools


def per_retriever(
    records: list[dict[str, Any]], shared_pool: bool = False
) -> dict[str, dict[str, dict[str, Any]]]:
    """collection -> retriever -> {measure: mean over defined queries, measure_n: their count}.

    `shared_pool`: the pool is the query's judged passages over all five retrievers' top 2K
    (Dallaire's per-query pool), instead of the event's own top 2K (what ragmon sees online).
    """
    pools = query_pools(records) if shared_pool else {}
    values: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for r in records:
        grades = [h["grade"] for h in r["hits"][: 2 * K]]
        utility = None
        if shared_pool:
            top = r["hits"][:K]
            seen = {h["docid"] for h in top}
            rest = [g for d, g in pools[r["collection"], r["qid"]].items() if d not in seen]
            grades = [h["grade"] for h in top] + rest
            utility = utility_grades(grades)
        out = compute(grades, K, utility=utility)
        for key, _ in MEASURES:
            if out[key] is not None:
                values[r["collection"]][r["run"]][key].append(out[key])  # type: ignore[arg-type]
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for collection, runs in values.items():
        table[collection] = {}
        for run, by_key in runs.items():
            row: dict[str, Any] = {}
            for key, _ in MEASURES:
                xs = by_key[key]
                row[key] = sum(xs) / len(xs) if xs else None
                row[f"{key}_n"] = len(xs)
            table[collection][run] = row
    return table


def order(rows: dict[str, dict[str, Any]], key: str) -> list[str]:
    """Retrievers best first by the measure's mean."""
    return sorted(rows, key=lambda run: -rows[run][key])


def render(table: dict[str, dict[str, dict[str, Any]]], pool: str) -> str:
    lines: list[str] = []
    for collection in sorted(table):
        rows = table[collection]
        lines += [
            f"### {collection}: K = 10, pool = {pool}, grades 0-3 mapped to 1-5",
            "",
            "| retriever | " + " | ".join(label for _, label in MEASURES) + " |",
            "| --- |" + " ---: |" * len(MEASURES),
        ]
        for run in order(rows, "ndcg"):
            cells = [f"{rows[run][key]:.3f} ({rows[run][f'{key}_n']})" for key, _ in MEASURES]
            lines.append(f"| {run} | " + " | ".join(cells) + " |")
        by_ndcg, by_ra = order(rows, "ndcg"), order(rows, "ra_nwg")
        runs = sorted(rows)
        tau = kendall_tau([rows[r]["ndcg"] for r in runs], [rows[r]["ra_nwg"] for r in runs])
        lines += [
            "",
            f"- order by nDCG@10:   {' > '.join(by_ndcg)}",
            f"- order by RA-nWG@10: {' > '.join(by_ra)}",
            f"- same order: {'yes' if by_ndcg == by_ra else 'no'}; Kendall tau-b {tau:.2f}",
            "",
        ]
    lines.append("(n) = queries where the measure is defined.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.stats.trec_ra_nwg")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the trec-dl folder")
    args = p.parse_args(argv)
    if not (args.data / "trec-dl-top20.jsonl").is_file():
        raise SystemExit(f"no trec-dl-top20.jsonl in {args.data}: pass --data")
    records = load(args.data)
    print(render(per_retriever(records), "the event's judged top 20 (ragmon online)"))
    print()
    pool = "the query's judged passages in all five top 20s"
    print(render(per_retriever(records, shared_pool=True), pool))


if __name__ == "__main__":
    main()
