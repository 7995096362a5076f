"""The pages' templates: every page that shows what an app or a person sent (a query, a
passage, an id, a name, a label, a search, an error) shows it as text, a hostile value opening
no tag and closing no attribute; no template turns escaping off; every template ships in the
wheel; no line break glues a word to a tag."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path

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


TEMPLATES = Path(__file__).resolve().parents[2] / "monitor" / "templates"
UNESCAPED = re.compile(r"\|\s*safe\b|autoescape\s+false|Markup\(", re.IGNORECASE)


def test_no_template_turns_escaping_off() -> None:
    """A value is marked safe in Python only where it was escaped first (`inline`)."""
    found = [
        f"{path.name}: {m.group(0)}"
        for path in sorted(TEMPLATES.iterdir())
        if path.suffix in {".html", ".css"}
        for m in UNESCAPED.finditer(path.read_text())
    ]
    assert not found, found


def test_every_template_file_is_package_data() -> None:
    """The wheel holds what pyproject's package-data names (tests/deploy/test_dockerfile.py
    builds one); a template of a new suffix would be missing from it."""
    data = tomllib.loads((TEMPLATES.parents[1] / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"]["package-data"]["ragmon"]
    files = [p for p in TEMPLATES.iterdir() if p.suffix != ".py" and p.is_file()]
    assert len(files) >= 10
    missing = [p.name for p in files if not any(fnmatch(f"templates/{p.name}", g) for g in globs)]
    assert not missing, missing


INLINE = r"(?:a|b|button|code|em|i|input|label|option|select|span)"


def test_no_line_break_glues_a_word_to_an_inline_tag() -> None:
    """A line break beside a tag vanishes (`ragmon.templates`): `<b>every</b>` at a line's end
    and `passage` on the next would render `<b>every</b>passage`."""
    found = []
    for path in sorted(TEMPLATES.glob("*.html")):
        lines = [line.strip() for line in path.read_text().splitlines()]
        for before, after in zip(lines, lines[1:], strict=False):
            if re.search(rf"</?{INLINE}\b[^>]*>$", before) and re.match(r"[\w(]", after):
                found.append(f"{path.name}: {before[-30:]!r} + {after[:30]!r}")
            if re.search(r"[\w,.;:)]$", before) and re.match(rf"</?{INLINE}\b", after):
                found.append(f"{path.name}: {before[-30:]!r} + {after[:30]!r}")
    assert not found, found
