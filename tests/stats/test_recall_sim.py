"""A small fixed-seed run of the recall-loss simulation (the full run, 200 replications, is
`nice python -m tests.stats.recall_sim --reps 200`; docs/measures.md has its figures)."""

from __future__ import annotations

from tests.stats.recall_sim import Setup, run


def test_a_recall_loss_moves_the_pooled_measures_not_the_per_event_ones() -> None:
    table = run(Setup(), reps=4, seed=7)
    assert table["hit"]["change"] < -0.15
    for m in ("ndcg_pooled", "ra_nwg_pooled", "n_recall4_pooled"):
        assert table[m]["change"] < -2 * table[m]["se"], (m, table[m])
        assert table[m]["beyond_1se"] == 1.0, (m, table[m])
    for m in ("ndcg", "ra_nwg"):
        assert abs(table[m]["change"]) < 2 * table[m]["se"], (m, table[m])


def test_with_nothing_lost_the_pooled_measures_hold() -> None:
    table = run(Setup(lost=0.0), reps=4, seed=8)
    for m in ("ndcg_pooled", "ra_nwg_pooled"):
        assert abs(table[m]["change"]) < 2 * table[m]["se"], (m, table[m])
