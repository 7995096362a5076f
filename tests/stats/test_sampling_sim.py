"""A small fixed-seed run of the sampling simulation (the full run, 300 replications per case,
is `nice python -m tests.stats.sampling_sim`; docs/sampling.md has its figures)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.stats.sampling_sim import BUDGET_SHARE, Case, cases, daily_cost, run

REPS = 6


def case(name: str) -> Case:
    (c,) = [c for c in cases(BUDGET_SHARE * daily_cost()) if c.name == name]
    return c


@pytest.mark.slow
def test_targeted_keeps_the_budget_all_day_and_every_mean_unbiased() -> None:
    tally = run(case("targeted"), REPS, seed=1)
    assert max(tally.over_jobs) <= 1.0
    assert min(tally.runout_h) >= 23.0
    for s in ("small", "medium", "large"):
        assert abs(float(np.mean(tally.error[s]))) < 0.02, s
        assert float(np.mean(tally.half[s])) < 0.11, s
    # the small series is judged whole (a verdict whenever its week had MIN_EVENTS events)
    assert tally.judged["small"] == tally.events["small"]


@pytest.mark.slow
def test_the_budget_alone_is_paced_to_the_last_hour() -> None:
    tally = run(case("tight"), REPS, seed=2)
    assert max(tally.over_jobs) <= 1.0
    assert min(tally.runout_h) >= 23.0
    assert float(np.mean(tally.spend)) > 0.95  # and it is spent, not hoarded


@pytest.mark.slow
def test_the_cliff_is_biased() -> None:
    tally = run(case("cliff"), 2, seed=3)
    assert max(tally.runout_h) < 6.0
    assert float(np.mean(tally.error["large"])) > 0.08  # the night's quality, not the day's
