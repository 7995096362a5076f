"""A small fixed-seed run of the corrected estimates' simulation (the full run, 300 replications
per case, is `nice python -m tests.stats.ppi_sim`; docs/agreement.md has its figures)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.stats.anchor_sim import JUDGES, MEASURES, truth
from tests.stats.ppi_sim import replicate

REPS = 20
EVENTS = 400


def _judge(label: str):
    (judge,) = [j for j in JUDGES if j.label == label]
    return judge


@pytest.mark.parametrize("label", ["good", "biased"])
def test_random_draws_are_as_tight_as_classical_ppi_and_rarely_withheld(label: str) -> None:
    judge = _judge(label)
    t = truth(judge, np.random.default_rng(1), events=10_000)
    case = replicate(judge, 30, "random", t, REPS, EVENTS, seed=5)
    assert np.mean(case.flagged) <= 0.1
    for m in MEASURES:
        assert case.width(f"{m}.ppi++") <= 1.1 * case.width(f"{m}.classical"), m
        assert case.width(f"{m}.ppi++") < case.width(f"{m}.people"), m
        assert case.rate(f"{m}.ppi++") >= 0.8, (m, case.rate(f"{m}.ppi++"))


@pytest.mark.parametrize("pattern", ["looks bad", "judge change"])
def test_a_sample_that_is_not_random_is_withheld(pattern: str) -> None:
    judge = _judge("good")
    t = truth(judge, np.random.default_rng(2), events=10_000)
    case = replicate(judge, 30, pattern, t, REPS, EVENTS, seed=6)
    assert all(case.flagged)
