"""The judge-free alerts' null simulation and outage delay (`tests.stats.signal_alert_sim`),
small and seeded; docs/signals.md has the full run's table."""

from __future__ import annotations

import numpy as np

from tests.stats.signal_alert_sim import Case, null_week, outage_delay


def test_a_stationary_week_fires_none_of_the_judge_free_alerts() -> None:
    for case in (Case(60, 0.02), Case(30, 0.0), Case(5, 0.1)):
        assert null_week(case, series=5, seed=1) == dict.fromkeys(
            ("RagmonEmptyResultsHigh", "RagmonSeriesStopped", "RagmonTopScoreDrop"), 0
        )


def test_an_outage_of_a_busy_series_fires_within_two_minutes() -> None:
    delays = outage_delay(Case(60, 0.02), trials=30, seed=2)
    assert max(delays) <= 2 and np.median(delays) <= 2
