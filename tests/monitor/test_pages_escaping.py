"""Every page that shows what an app or a person sent (a query, a passage, an id, a name, a
label, a search, an error) shows it as text: the templates escape it, so a hostile value opens
no tag and closes no attribute. Rendered by the templates the API and the report use."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from ragmon.core import pages, review_pages
from ragmon.core.agreement import Agreement
from ragmon.core.corrected import Corrected
from ragmon.core.drift import Interval
from ragmon.core.search import parse_search
from ragmon.core.wire import SEP
from ragmon.report.document import Doc, Link, to_html
from ragmon.templates import render

HOSTILE = "<script>alert(1)</script>\" onmouseover=\"alert(2)' onfocus='alert(3)&amp;"
LABELS = {"app": "shop", "index": HOSTILE, "retriever": "bm25", "segment": "faq"}


class Parsed(HTMLParser):
    """The page as a browser reads it: its tags, their attributes, its text."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += [(k, v or "") for k, v in attrs]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _event() -> dict:
    return {
        "labels": LABELS,
        "event_id": f"e-{HOSTILE}",
        "status": "done",
        "timestamp": "2026-12-07T10:00:00Z",
        "k": 2,
        "trace_id": HOSTILE,
        "query": HOSTILE,
        "error": HOSTILE,
        "measures": {"ndcg": 0.5},
        "grade_sources": {"judge": 2},
        "judge": HOSTILE,
        "passages": [
            {"rank": 1, "id": HOSTILE, "score": 0.9, "grade": 3, "grade_source": "judge",
             "graded_by": HOSTILE, "text": HOSTILE,
             "human_grades": [{"reviewer": HOSTILE, "grade": 2}]},
            {"rank": 2, "id": "p2", "score": 0.1, "grade": 0, "grade_source": "judge",
             "graded_by": "openai/x", "text": "plain", "duplicate_of": 1},
        ],
    }  # fmt: skip


def _standing() -> dict:
    interval = Interval(0.5, 0.4, 0.6, 40, 12, 11.0)
    agreement = {HOSTILE: Agreement(40, 12, (), interval, interval, interval, (), {})}
    flagged = Corrected(None, None, None, 0.0, 0, None, reason=HOSTILE, random_draw=False)
    return review_pages.standing(agreement, {"ndcg": flagged}, 7)


def _report() -> str:
    doc = Doc(HOSTILE)
    doc.h(2, HOSTILE, "verdicts")
    doc.p(f"{HOSTILE} `{HOSTILE}`")
    doc.ul([HOSTILE])
    doc.table([HOSTILE], [[Link(HOSTILE, "https://x/?a=1&b=2")], [HOSTILE]], "regressions")
    doc.img("QUJD", HOSTILE)
    return to_html(doc)


def _pages() -> dict[str, str]:
    form = pages.GradeForm(reviewer=HOSTILE, back=f"/ui/x?{HOSTILE}", asked=HOSTILE)
    search = parse_search({"app": "shop", "query": HOSTILE, "meta": "tenant=" + HOSTILE})
    row = pages.SeriesRow(SEP.join(LABELS.values()), 6, {"hit": (6, 0.0, 0.0)}, {})
    rule = pages.LevelRule(3.0, 20)
    return {
        "overview": render(pages.overview([row], 7, rule)),
        "events": render(pages.events(search, [_event()], "cursor", True)),
        "event": render(pages.event(_event(), True, form)),
        "event, no form": render(pages.event(_event(), True)),
        "review": render(review_pages.review(_event(), form, 5, _standing())),
        "choose": render(review_pages.choose([(SEP.join(LABELS.values()), 3)])),
        "message": render(pages.message(HOSTILE, HOSTILE)),
        "login": render(pages.login(HOSTILE, True)),
        "report.html": _report(),
    }


@pytest.mark.parametrize("name", list(_pages()))
def test_a_hostile_value_is_text_on_every_page(name: str) -> None:
    page = _pages()[name]
    parsed = Parsed(page)
    assert "script" not in parsed.tags, "a value opened a tag"
    names = {k for k, _ in parsed.attributes}
    assert not names & {"onmouseover", "onfocus"}, "a value closed its attribute"
    shown = "".join(parsed.text) + "".join(v for _, v in parsed.attributes)
    assert HOSTILE in shown, "the value is shown as it was sent"
    assert "&lt;script&gt;" in page


def test_the_list_page_cuts_a_long_query_after_escaping_nothing_twice() -> None:
    """The events list cuts a query to QUERY_SHOWN characters of the text, not of its escape."""
    event = {**_event(), "query": "<" * (pages.QUERY_SHOWN + 5)}
    page = render(pages.events(parse_search({}), [event], None, False))
    cell = page.split("<td class=query>")[1].split("</td>")[0]
    assert cell == "&lt;" * pages.QUERY_SHOWN + "…"
