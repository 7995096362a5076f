"""A small fixed-seed run of the recall-loss simulation (the full run, 200 replications, is
`nice python -m tests.stats.recall_sim --reps 200`; docs/measures.md has its figures)."""

from __future__ import annotations

from tests.stats.recall_sim import Setup, run


def test_a_recall_loss_moves_the_pooled_measures_not_the_per_event_ndcg() -> None:
    """Per-event RA-nWG falls too: a lost query scores 0 against its pool, not NA (its
    defined share holds)."""
    table = run(Setup(), reps=4, seed=7)
    assert table["hit"]["change"] < -0.15
    for m in ("ndcg_pooled", "ra_nwg_pooled", "n_recall4_pooled", "ra_nwg"):
        assert table[m]["change"] < -2 * table[m]["se"], (m, table[m])
        assert table[m]["beyond_1se"] == 1.0, (m, table[m])
    assert abs(table["ndcg"]["change"]) < 2 * table["ndcg"]["se"], table["ndcg"]
    ra = table["ra_nwg"]
    assert ra["defined_cur"] > ra["defined_base"] - 0.05, ra  # scored, not dropped


def test_with_nothing_lost_the_pooled_measures_hold() -> None:
    table = run(Setup(lost=0.0), reps=4, seed=8)
    for m in ("ndcg_pooled", "ra_nwg_pooled"):
        assert abs(table[m]["change"]) < 2 * table[m]["se"], (m, table[m])
