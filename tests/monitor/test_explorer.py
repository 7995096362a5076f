"""The explorer's pure parts: index members sort as their values do, a search survives the
round trip through its URL (what links and pages carry), and bad parameters are named."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragmon.core.index_members import decode_value, encode_time, encode_value, within
from ragmon.core.search import SearchError, encode_cursor, parse_search

values = st.floats(min_value=-999.0, max_value=1e6, allow_nan=False)


@given(values, values)
def test_encoded_values_sort_as_the_values(a: float, b: float) -> None:
    ea, eb = encode_value(a), encode_value(b)
    assert len(ea) == len(eb) == 13
    if round(a, 6) < round(b, 6) - 1e-6:
        assert ea < eb
    assert decode_value(ea) == pytest.approx(a, abs=1e-6)


@given(st.floats(min_value=0, max_value=4e9), st.floats(min_value=0, max_value=4e9))
def test_encoded_times_sort_as_the_times(a: float, b: float) -> None:
    if a < b - 0.001:
        assert encode_time(a) < encode_time(b)


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"app": "shop", "retriever": "bm25|dense", "ndcg_lt": "0.3", "hit": "0"},
        {"from": "1795132800000", "to": "1795219200000", "grade_source": "known"},
        {"sort": "harm", "order": "asc", "limit": "7", "trace_id": "abc"},
        {"status": "failed", "segment": "faq"},
    ],
)
def test_a_search_survives_its_url(query: dict[str, str]) -> None:
    search = parse_search(query)
    again = parse_search(search.params())
    assert again == search
    member = "1795132800.25" if search.status == "failed" else "1795132800000|shop|e1"
    cursor = encode_cursor(search, member)  # failed events: a failure time
    assert parse_search(search.params(cursor)).after == member


@given(st.floats(allow_nan=False))
def test_any_finite_threshold_encodes(value: float) -> None:
    """A threshold past the encodable range (1e308) takes its end, never an OverflowError."""
    assert len(encode_value(value)) == 13


def test_grafana_all_and_empty_values_mean_any() -> None:
    search = parse_search({"app": ".*", "index": "", "retriever": "bm25"})
    assert search.labels == {"retriever": "bm25"}
    assert search.series_matches("x|y|bm25|z") and not search.series_matches("x|y|dense|z")


def test_default_orders_are_newest_and_worst_first() -> None:
    assert parse_search({}).descending  # newest first
    assert not parse_search({"sort": "ndcg"}).descending  # lowest nDCG first
    assert parse_search({"sort": "harm"}).descending  # highest Harm first


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"retriever": "bm25 or dense"}, "retriever: 'bm25 or dense' is not a label value"),
        ({"status": "queued"}, "status: one of done, failed"),
        ({"grade_source": "human"}, "grade_source: one of known, cache, judge"),
        ({"order": "up"}, "order: asc or desc"),
        ({"status": "failed", "ndcg_lt": "0.2"}, "status=failed: failed events have no grades"),
        ({"sort": "ndcg", "cursor": encode_cursor(parse_search({}), "x")}, "cursor: from a search"),
    ],
)
def test_bad_parameters_are_named(query: dict[str, str], says: str) -> None:
    with pytest.raises(SearchError, match="^" + says.replace("(", r"\(").replace(")", r"\)")):
        parse_search(query)


@pytest.mark.parametrize(
    ("member", "lo", "hi", "inside"),
    [
        ("b", "-", "+", True),
        ("b", "[b", "[b", True),
        ("b", "(b", "+", False),
        ("b", "-", "(b", False),
        ("b|x", "[b", "(c", True),
        ("c", "[a", "(c", False),
    ],
)
def test_within_reads_lex_bounds_as_redis_does(member: str, lo: str, hi: str, inside: bool) -> None:
    assert within(member, lo, hi) is inside
