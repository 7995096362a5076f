"""The HTML pages' templates (Jinja2, autoescaped) and the one environment that renders them.

`ragmon.core` says which template a page is and gives its values (`Page`, pure); this package
loads the templates, package data beside this file, and renders them: every value is escaped
unless a template marks it safe. A line break beside a tag or a `{% %}` block vanishes
and one inside text is a space, so that a template is written one element a line yet renders
with no whitespace between the cells (the pages' tests read them so).
"""

from __future__ import annotations

import re
from functools import cache

import jinja2
from jinja2.ext import Extension
from markupsafe import Markup, escape

from ragmon.core.pages import Page, num

_BREAK_BY_TAG = re.compile(r"(?:(?<=>)|(?<=[%#]\}))[ \t]*\n\s*|\s*\n[ \t]*(?=<|\{[%#])")
_BREAK = re.compile(r"[ \t]*\n\s*")
_CODE = re.compile(r"`([^`]+)`")


class JoinLines(Extension):
    """Joins a template's lines before it is parsed (the rule in this module's docstring)."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return _BREAK.sub(" ", _BREAK_BY_TAG.sub("", source)).strip()


def inline(text: str) -> Markup:
    """Text with its `code spans` set in <code>, escaped first."""
    return Markup(_CODE.sub(r"<code>\1</code>", str(escape(text))))


@cache
def environment() -> jinja2.Environment:
    """Built on the first page a process renders (the pages' child process has its own)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ragmon", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        extensions=[JoinLines],
        finalize=lambda value: "" if value is None else value,  # an absent value shows empty
    )
    env.filters.update(num=num, inline=inline)
    return env


def render(page: Page) -> str:
    return environment().get_template(page.template).render(page.context)
