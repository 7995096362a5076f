"""The TREC DL RA-nWG@10 vs nDCG@10 comparison (tests/stats/trec_ra_nwg.py) on the shared data."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragmon.core.measures import MeasureParams
from tests.monitor.test_measures_llm import reference_llm
from tests.stats import trec_ra_nwg


def test_means_match_an_independent_computation(trec_dl: Path) -> None:
    records = trec_ra_nwg.load(trec_dl)
    table = trec_ra_nwg.per_retriever(records)
    assert {len(rows) for rows in table.values()} == {5}
    for collection, rows in table.items():
        for run, row in rows.items():
            mine = [
                reference_llm([h["grade"] for h in r["hits"][:20]], 10, MeasureParams(), None)
                for r in records
                if r["collection"] == collection and r["run"] == run
            ]
            for key in ("ra_nwg", "n_recall4", "precision4"):
                xs = [m[key] for m in mine if m[key] is not None]
                assert row[f"{key}_n"] == len(xs)
                assert row[key] == pytest.approx(sum(xs) / len(xs)), (collection, run, key)


def test_the_shared_pool_never_raises_the_ideal(trec_dl: Path) -> None:
    """A larger pool can only add heavier passages to the ideal: N-Recall4+ can only fall or
    gain queries, and Precision4+ (no pool in it) does not move."""
    records = trec_ra_nwg.load(trec_dl)
    own, shared = trec_ra_nwg.per_retriever(records), trec_ra_nwg.per_retriever(records, True)
    for collection, rows in own.items():
        for run, row in rows.items():
            other = shared[collection][run]
            assert other["precision4"] == pytest.approx(row["precision4"])
            assert other["n_recall4_n"] >= row["n_recall4_n"]


def test_render_states_the_orders(trec_dl: Path) -> None:
    table = trec_ra_nwg.per_retriever(trec_ra_nwg.load(trec_dl))
    text = trec_ra_nwg.render(table, "test")
    for rows in table.values():
        by_ndcg = trec_ra_nwg.order(rows, "ndcg")
        by_ra = trec_ra_nwg.order(rows, "ra_nwg")
        assert f"- order by nDCG@10:   {' > '.join(by_ndcg)}" in text
        assert f"same order: {'yes' if by_ndcg == by_ra else 'no'}" in text
