"""Differential test of the measures against pytrec_eval (trec_eval) on TREC DL 2019/2020 runs.

Each record of `trec-dl-top20.jsonl` is one event: a run's top 20 for a query, with NIST grades
(None where never judged). With qrels restricted to the record's judged passages, trec_eval's
ideal ranking is our judged pool and an unjudged passage is non-relevant, exactly as
docs/measures.md defines them; its `ndcg_cut` uses linear gain. With the full qrels, N_p is
known, which checks `recall` and `f` against `recall_10` / `set_F`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytrec_eval = pytest.importorskip("pytrec_eval")

from ragmon.core.measures import MeasureParams, compute  # noqa: E402

CUTS = (1, 5, 10, 20)
LEVELS = (1, 2)
TOL = 1e-9


@pytest.fixture(scope="module")
def records(trec_dl: Path) -> list[dict[str, Any]]:
    with (trec_dl / "trec-dl-top20.jsonl").open() as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def full_qrels(trec_dl: Path) -> dict[str, dict[str, dict[str, int]]]:
    """collection → qid → docid → grade, from the NIST qrels files."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for collection, name in (
        ("trec-dl19-passage", "qrels.dl19-passage.txt"),
        ("trec-dl20-passage", "qrels.dl20-passage.txt"),
    ):
        qrels: dict[str, dict[str, int]] = defaultdict(dict)
        for line in (trec_dl / name).read_text().splitlines():
            qid, _, docid, grade = line.split()
            qrels[qid][docid] = int(grade)
        out[collection] = dict(qrels)
    return out


def grades_of(record: dict[str, Any]) -> list[int | None]:
    return [hit["grade"] for hit in record["hits"]]


def run_of(record: dict[str, Any], cut: int | None = None) -> dict[str, float]:
    """The record's ranking with strictly decreasing scores (trec_eval re-sorts by score)."""
    hits = record["hits"][:cut]
    return {hit["docid"]: float(len(record["hits"]) - i) for i, hit in enumerate(hits)}


def pool_qrels(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """One query per record, judged only on the record's own passages."""
    qrels = {}
    for n, record in enumerate(records):
        judged = {h["docid"]: h["grade"] for h in record["hits"] if h["grade"] is not None}
        qrels[str(n)] = judged
    return qrels


def test_data_is_what_the_readme_says(records: list[dict[str, Any]], full_qrels: Any) -> None:
    assert len(records) == 485
    for record in records:
        assert [h["rank"] for h in record["hits"]] == list(range(1, 21))
        assert len({h["docid"] for h in record["hits"]}) == 20
        qrels = full_qrels[record["collection"]][record["qid"]]
        for hit in record["hits"]:  # the grades in the file are the NIST ones
            assert hit["grade"] == qrels.get(hit["docid"])


@pytest.mark.parametrize("level", LEVELS)
def test_ndcg_precision_rr_equal_trec_eval_with_pool_qrels(
    records: list[dict[str, Any]], level: int
) -> None:
    qrels = pool_qrels(records)
    assert all(qrels.values()), "every record has a judged passage (else trec_eval skips it)"
    full_run = {str(n): run_of(r) for n, r in enumerate(records)}
    measures = {f"ndcg_cut.{','.join(map(str, CUTS))}", f"P.{','.join(map(str, CUTS))}"}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=level)
    rr_evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}, relevance_level=level)
    reference = evaluator.evaluate(full_run)
    reference_rr = {
        k: rr_evaluator.evaluate({str(n): run_of(r, k) for n, r in enumerate(records)})
        for k in CUTS
    }
    params = MeasureParams(relevant_grade=level, ndcg_gain="linear")

    compared = 0
    mismatches = []
    for n, record in enumerate(records):
        q = str(n)
        for k in CUTS:
            ours = compute(grades_of(record), k, params)
            pairs = (
                ("ndcg", ours["ndcg"], reference[q][f"ndcg_cut_{k}"]),
                ("precision", ours["precision"], reference[q][f"P_{k}"]),
                ("rr", ours["rr"], reference_rr[k][q]["recip_rank"]),
            )
            for name, got, want in pairs:
                compared += 1
                if abs(got - want) > TOL:
                    mismatches.append((record["run"], record["qid"], k, name, got, want))
    assert not mismatches, mismatches[:10]
    assert compared == len(records) * len(CUTS) * 3
    # The comparison is not vacuous: the values vary across records.
    assert len({round(reference[str(n)]["ndcg_cut_10"], 6) for n in range(len(records))}) > 100


@pytest.mark.parametrize("level", LEVELS)
def test_recall_and_f_with_known_relevant_total_equal_trec_eval(
    records: list[dict[str, Any]], full_qrels: Any, level: int
) -> None:
    k = 10
    qrels: dict[str, dict[str, int]] = {}
    for n, record in enumerate(records):
        qrels[str(n)] = full_qrels[record["collection"]][record["qid"]]
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, {"recall.10", "P.10", "num_rel"}, relevance_level=level
    )
    cut_evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"set_F"}, relevance_level=level)
    reference = evaluator.evaluate({str(n): run_of(r) for n, r in enumerate(records)})
    reference_f = cut_evaluator.evaluate({str(n): run_of(r, k) for n, r in enumerate(records)})
    params = MeasureParams(relevant_grade=level, f_alpha=0.5)

    mismatches = []
    for n, record in enumerate(records):
        q = str(n)
        relevant_total = sum(g >= level for g in qrels[q].values())
        assert relevant_total == reference[q]["num_rel"]
        ours = compute(grades_of(record), k, params, relevant_total=relevant_total)
        for name, got, want in (
            ("recall", ours["recall"], reference[q]["recall_10"]),
            ("precision", ours["precision"], reference[q]["P_10"]),
            ("f", ours["f"], reference_f[q]["set_F"]),  # F1 of the top 10 as a set
        ):
            if got is None or abs(got - want) > TOL:
                mismatches.append((record["run"], record["qid"], name, got, want))
    assert not mismatches, mismatches[:10]


@pytest.mark.parametrize("level", LEVELS)
def test_recall_and_precision_match_the_stored_reference_values(
    records: list[dict[str, Any]], full_qrels: Any, trec_dl: Path, level: int
) -> None:
    """The shared per-query values (pytrec_eval, full qrels) agree with ours at K = 1, 5, 10."""
    expected = json.loads((trec_dl / "pytrec_eval-expected.json").read_text())
    params = MeasureParams(relevant_grade=level)
    checked = 0
    for record in records:
        year = record["collection"].split("-")[1]  # "dl19" / "dl20"
        want = expected[f"{year}/{record['run']}"][f"relevance_level_{level}"].get(record["qid"])
        if want is None:
            continue
        qrels = full_qrels[record["collection"]][record["qid"]]
        relevant_total = sum(g >= level for g in qrels.values())
        for k in (1, 5, 10):
            ours = compute(grades_of(record), k, params, relevant_total=relevant_total)
            assert ours["precision"] == pytest.approx(want[f"P_{k}"], abs=TOL), (record["qid"], k)
        ours = compute(grades_of(record), 10, params, relevant_total=relevant_total)
        assert ours["recall"] == pytest.approx(want["recall_10"], abs=TOL), record["qid"]
        ours = compute(grades_of(record), 20, params, relevant_total=relevant_total)
        assert ours["recall"] == pytest.approx(want["recall_20"], abs=TOL), record["qid"]
        checked += 1
    assert checked == len(records)
