"""A tiny document model rendered twice: Markdown (report.md) and self-contained HTML (its
template, `ragmon/templates/report.html`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragmon.core.pages import Page
from ragmon.templates import render

_CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Link:
    """A table cell that links somewhere (`url` is ours: http(s), percent-encoded)."""

    text: str
    url: str


Cell = str | Link


@dataclass
class Doc:
    """Blocks in order: ("h", level, text, anchor), ("p", text), ("ul", items),
    ("table", headers, rows, css_id), ("img", base64_png, alt)."""

    title: str
    blocks: list[tuple] = field(default_factory=list)

    def h(self, level: int, text: str, anchor: str = "") -> None:
        self.blocks.append(("h", level, text, anchor))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def ul(self, items: list[str]) -> None:
        if items:
            self.blocks.append(("ul", items))

    def table(
        self, headers: Sequence[str], rows: Sequence[Sequence[Cell]], css_id: str = ""
    ) -> None:
        self.blocks.append(("table", headers, rows, css_id))

    def img(self, png_b64: str, alt: str) -> None:
        self.blocks.append(("img", png_b64, alt))


_MD_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "\\[", "]": "\\]"})


def _md(text: str) -> str:
    """Text for report.md, which also holds untrusted text (queries, ids, labels): outside code
    spans, `<` `>` `&` become entities and `[` `]` are escaped, so no Markdown viewer renders
    a tag (`<script>`, `<img onerror>`) or a link (`[x](javascript:...)`) from it; inside a
    code span everything is shown literally anyway."""
    parts = _CODE.split(text)  # odd items: code span contents
    return "".join(
        f"`{part}`" if i % 2 else part.translate(_MD_ESCAPES) for i, part in enumerate(parts)
    )


def _md_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        return f"[{_md_cell(cell.text)}](<{cell.url}>)"
    return _md(cell).replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Doc) -> str:
    out = [f"# {_md(doc.title)}", ""]
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            out += ["#" * b[1] + " " + _md(b[2]), ""]
        elif kind == "p":
            out += [_md(b[1]), ""]
        elif kind == "ul":
            out += [f"- {_md(item)}" for item in b[1]] + [""]
        elif kind == "table":
            headers, rows = b[1], b[2]
            out.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
            out.append("|" + "|".join(" --- " for _ in headers) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("")
        elif kind == "img":
            out += [f"*Plot: {_md(b[2])} (embedded in report.html).*", ""]
    return "\n".join(out).rstrip() + "\n"


def _row_class(css_id: str, row: Sequence[Cell]) -> str:
    """A regression's severity, a verdict's kind: the row's colour in report.html."""
    if css_id == "regressions" and len(row) > 6 and isinstance(row[6], str):
        return row[6].split()[0]
    if css_id == "verdicts" and row[1] == "regression":
        return "regression"
    if css_id == "verdicts" and str(row[2]).startswith("poor"):
        return "poor"
    return ""


def to_html(doc: Doc) -> str:
    """The self-contained report.html (`ragmon/templates/report.html`); a table's rows come
    with their class and their cells as (text, url or "")."""
    blocks = [
        (
            "table",
            b[1],
            [
                (
                    _row_class(b[3], row),
                    [(c.text, c.url) if isinstance(c, Link) else (c, "") for c in row],
                )
                for row in b[2]
            ],
            b[3],
        )
        if b[0] == "table"
        else b
        for b in doc.blocks
    ]
    return render(Page("report.html", {"title": doc.title, "blocks": blocks})) + "\n"
