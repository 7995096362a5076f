"""A small fixed-seed run of the anchor simulation (the full run, 500 replications per case, is
`nice python -m tests.stats.anchor_sim`; docs/agreement.md has its figures)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.stats.anchor_sim import JUDGES, MEASURES, replicate, truth

REPS = 30
EVENTS = 300  # judged events per window (the full run: 2,000)
TRUTH = 10_000  # events of the population the true values come from


@pytest.mark.parametrize(("label", "passages"), [("good", 200), ("biased", 50), ("noisy", 1000)])
def test_intervals_cover_and_the_corrected_one_is_never_wider(label: str, passages: int) -> None:
    (judge,) = [j for j in JUDGES if j.label == label]
    t = truth(judge, np.random.default_rng(1), events=TRUTH)
    tally = replicate(judge, passages, t, REPS, EVENTS, seed=passages)
    for m in MEASURES:
        assert tally.missing.get(f"{m}.ppi", 0) == 0, m
        assert tally.rate(f"{m}.ppi") >= 0.85, (m, tally.rate(f"{m}.ppi"))
        assert tally.rate(f"{m}.human") >= 0.85, (m, tally.rate(f"{m}.human"))
        assert sum(tally.values[f"{m}.wider"]) == 0, m
    for key in ("exact", "kappa", "difference"):
        assert tally.rate(key) >= 0.85, (key, tally.rate(key))


def test_the_biased_judge_alone_is_off_and_the_correction_is_not() -> None:
    (judge,) = [j for j in JUDGES if j.label == "biased"]
    t = truth(judge, np.random.default_rng(2), events=TRUTH)
    tally = replicate(judge, 200, t, REPS, EVENTS, seed=3)
    assert tally.mean("precision.judge_error") > 0.1  # over-grading inflates P@K
    assert abs(tally.mean("precision.ppi") - t.means["precision"]) < 0.03
    assert tally.mean("difference") == pytest.approx(t.difference, abs=0.05)
    assert t.difference == pytest.approx(0.5, abs=0.05)  # the case is what it claims
