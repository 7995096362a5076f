"""The QPP correlation study (tests/stats/trec_qpp.py) on the shared TREC DL data: its numbers
are computed right, and tests/stats/README.md shows the table it prints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.stats import trec_qpp

DOC = Path(__file__).resolve().parent / "README.md"


def test_every_run_and_the_pool_have_their_queries(trec_dl: Path) -> None:
    cells = trec_qpp.table(trec_qpp.load(trec_dl))
    for rows in cells.values():
        counts = {name: max(c.n for c in row.values()) for name, row in rows.items()}
        assert counts.pop("pooled") == 485
        assert len(counts) == 10
        assert {n for name, n in counts.items() if name.startswith("dl19")} == {43}
        assert {n for name, n in counts.items() if name.startswith("dl20")} == {54}


def test_predictors_and_correlations_match_numpy(trec_dl: Path) -> None:
    records = [r for r in trec_qpp.load(trec_dl) if r["run"] == "BM25"]
    scores = np.array([[h["score"] for h in r["hits"]] for r in records])
    top = scores[:, :10]
    nqc = top.std(axis=1) / np.abs(top.mean(axis=1))
    wig = (top.mean(axis=1) - scores.min(axis=1)) / np.abs(scores.min(axis=1))
    for name, want in (("NQC", nqc), ("WIG", wig), ("top-1 minus top-10", top[:, 0] - top[:, 9])):
        got = np.array([dict(trec_qpp.PREDICTORS)[name](r) for r in records])
        np.testing.assert_allclose(got, want, rtol=1e-12)
        ndcg = np.array([r["ndcg"]["trec_eval"] for r in records])
        assert trec_qpp.pearson(list(got), list(ndcg)) == pytest.approx(
            np.corrcoef(got, ndcg)[0, 1], abs=1e-12
        )


def test_fisher_interval_holds_r() -> None:
    low, high = trec_qpp.fisher_interval(0.3, 50)
    assert low < 0.3 < high
    assert (round(low, 3), round(high, 3)) == (0.024, 0.534)


def test_the_docs_show_the_current_table(trec_dl: Path) -> None:
    table = trec_qpp.render(trec_qpp.table(trec_qpp.load(trec_dl)))
    text = DOC.read_text()
    for line in table.strip().splitlines():
        assert line in text, f"tests/stats/README.md lacks (python -m tests.stats.trec_qpp): {line}"
