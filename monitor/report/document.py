"""A tiny document model rendered twice: Markdown (report.md) and self-contained HTML."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

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


def _html_cell(cell: Cell) -> str:
    if isinstance(cell, Link):
        return f'<a href="{html.escape(cell.url)}">{_inline(cell.text)}</a>'
    return _inline(cell)


def _inline(text: str) -> str:
    return _CODE.sub(r"<code>\1</code>", html.escape(text, quote=False))


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1240px;color:#1d232b;padding:0 16px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin-top:20px}
table{border-collapse:collapse;margin:8px 0 12px;font-size:13px}
th,td{border:1px solid #d5d9de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f6}
tr.major td:first-child,tr.regression td:first-child,tr.poor td:first-child{
border-left:5px solid #c92a2a}
tr.moderate td:first-child{border-left:5px solid #e67700}
tr.minor td:first-child{border-left:5px solid #f2c94c}
#regressions td{font-size:14px}code{background:#f2f4f6;padding:0 3px;border-radius:3px}
img{max-width:100%;border:1px solid #eee;margin:6px 0}.muted{color:#68717d}
"""


def to_html(doc: Doc) -> str:
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(doc.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(doc.title)}</h1>",
    ]
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            anchor = f' id="{html.escape(b[3])}"' if b[3] else ""
            out.append(f"<h{b[1]}{anchor}>{_inline(b[2])}</h{b[1]}>")
        elif kind == "p":
            out.append(f"<p>{_inline(b[1])}</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            headers, rows, css_id = b[1], b[2], b[3]
            tid = f' id="{css_id}"' if css_id else ""
            out.append(f"<table{tid}><thead><tr>")
            out.append("".join(f"<th>{_inline(h)}</th>" for h in headers) + "</tr></thead><tbody>")
            for row in rows:
                cls = ""
                if css_id == "regressions" and len(row) > 6 and isinstance(row[6], str):
                    cls = f' class="{html.escape(row[6].split()[0])}"'
                elif css_id == "verdicts" and row[1] == "regression":
                    cls = ' class="regression"'
                elif css_id == "verdicts" and str(row[2]).startswith("poor"):
                    cls = ' class="poor"'
                out.append(
                    f"<tr{cls}>" + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>"
                )
            out.append("</tbody></table>")
        elif kind == "img":
            out.append(
                f'<figure><img alt="{html.escape(b[2])}" src="data:image/png;base64,{b[1]}">'
                f"<figcaption class=muted>{html.escape(b[2])}</figcaption></figure>"
            )
    out.append("</body></html>")
    return "\n".join(out) + "\n"
