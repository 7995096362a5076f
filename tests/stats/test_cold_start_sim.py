"""A small fixed-seed run of the cold-start simulation meets the bars of its full run
(`python -m tests.stats.cold_start_sim`, 300 replications, docs/sampling.md): a new busy
series' first hour within its allowance, no probability 0, the old series' rate kept."""

from __future__ import annotations

import random

from tests.stats.cold_start_sim import replicate


def test_a_new_busy_series_first_hour_stays_within_its_allowance() -> None:
    rng = random.Random(7)
    rows = [replicate(rng) for _ in range(6)]
    assert all(r["share"] <= 1.0 for r in rows), rows
    assert all(r["lowest"] > 0 for r in rows)
    assert all(abs(r["old"] - 1) < 0.1 for r in rows), rows
