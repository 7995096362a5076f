"""The weekly report when the events form too few question clusters: it says it cannot tell,
never `unchanged` with zero-width intervals."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from ragmon.report.analyze import analyze, summary_line
from ragmon.report.compare import CANNOT_TELL
from ragmon.report.document import Doc, to_markdown
from ragmon.report.gather import Dataset
from ragmon.report.render import measures_section
from tests.stats import traffic
from tests.stats.report_sim import BASELINE, CURRENT, _drop
from tests.stats.traffic import window_data


@pytest.fixture
def small_bank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A tenth of the simulations' bank of rankings: one cluster needs no more distinct
    rankings, and each is a `compute` per retriever. The banks are cached: emptied before
    and after, so no other test in this process reads one of this size."""
    caches = (traffic.bank, traffic.order, traffic._z, traffic.wording)
    for cached in caches:
        cached.cache_clear()
    monkeypatch.setattr(traffic, "BANK", traffic.BANK // 10)
    yield
    for cached in caches:
        cached.cache_clear()


@pytest.mark.usefixtures("small_bank")
def test_one_cluster_is_cannot_tell_not_unchanged() -> None:
    # Every event shares passage ids (a tiny knowledge base): one cluster per window. The
    # report showed `0.578 [0.578, 0.578]`, p = 1 and "unchanged" for a retriever whose nDCG
    # fell by 0.07.
    rng = np.random.default_rng(3)
    base_streams, cur_streams = _drop(500, 0.07)
    base = window_data(rng, BASELINE, base_streams, salt=1)
    cur = window_data(rng, CURRENT, cur_streams, salt=2)
    for w in (base, cur):
        for ev in w.events.values():
            ev.passages = [("doc-1", "doc-2")] * len(ev.queries)
    report = analyze(Dataset(cur, base, [], True, 35.0))
    verdicts = {v.group[2]: v.verdict for v in report.verdicts}
    assert verdicts == {"bm25": CANNOT_TELL, "dense": CANNOT_TELL, "hybrid": CANNOT_TELL}
    assert not any(r.status == "unchanged" for r in report.rows)
    line = summary_line(report)
    assert "cannot tell for 3 retriever(s) (too few question clusters)" in line
    doc = Doc("report")
    measures_section(doc, report)
    text = to_markdown(doc).replace("\\[", "[").replace("\\]", "]")
    assert f"Verdict: {CANNOT_TELL}." in text
    assert text.count("[cannot tell]") == 2 * len(report.rows)  # no interval of zero width
