"""The docs state the code's contracts and link only to what exists.

- Links: every relative link and `#anchor` in the project's Markdown (README, CONTRIBUTING,
  docs/, deploy/) resolves to a file and, for an anchor, to a heading of that file (GitHub's
  slugs); no network, so web links are not fetched.
- Every page of docs/ is in the README's table of contents.
- Settings: docs/configuration.md has one row per variable `monitor/settings.py` reads, with the
  code's default, and no other; every table with a `default` column states the code's default;
  every `RAGMON_*` name in the docs is a setting.
- Measures: docs/measures.md's table has a row for each measure of `measure_table.py`.
- Metrics: every `ragmon_*` name in the docs is one `/metrics` can serve (the table of
  docs/metrics.md itself is generated: tests/test_generated.py).
- CLI: docs/cli.md names every command and option of `ragmon`; docs/api.md every API route.
"""

from __future__ import annotations

import argparse
import re
import unicodedata
from dataclasses import MISSING, Field, fields
from functools import cache
from pathlib import Path

import pytest

from ragmon.cli import build_parser
from ragmon.core import catalog
from ragmon.core.measure_table import MEASURES
from ragmon.environment import OTHER_VARIABLES
from ragmon.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SKIP_DIRS = {".git", ".venv", ".typecheck", "node_modules", ".pytest_cache", "build"}
# Environment variables the docs name that are not settings of ragmon's processes: the test
# runner's and benchmarks' knobs, and the app-side variables of integration examples.
# read by deployment files and tools (environment.OTHER_VARIABLES), a JavaScript constant, and the
# misspelling docs/configuration.md shows ragmon's warning about
NOT_SETTINGS = OTHER_VARIABLES | {"RAGMON_KEY", "RAGMON_SAMPLE_RAT"}


def markdown_files() -> list[Path]:
    return sorted(
        p
        for p in ROOT.rglob("*.md")
        if not SKIP_DIRS & set(p.relative_to(ROOT).parts) and "pytest-of" not in str(p)
    )


def user_docs() -> list[Path]:
    """The pages users read (CONTRIBUTING.md may describe designs not built yet)."""
    return [p for p in markdown_files() if p.name != "CONTRIBUTING.md" and "tests" not in p.parts]


def prose(text: str) -> str:
    """`text` without fenced code blocks (links there are code, not links)."""
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower-cased, punctuation dropped, spaces → -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    kept = "".join(
        c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN"
    )  # letters, numbers (any script), space, hyphen, underscore
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    out |= set(re.findall(r'<a (?:name|id)="([^"]+)"', path.read_text(encoding="utf-8")))
    return frozenset(out)


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
HTML = re.compile(r"<(?:a|img)\s[^>]*(?:href|src)=\"([^\"]+)\"")


def links(text: str) -> list[str]:
    body = re.sub(r"`[^`\n]*`", "", prose(text))  # inline code is not a link either
    return LINK.findall(body) + REF.findall(body) + HTML.findall(body)


def broken(path: Path, target: str, root: Path = ROOT) -> str | None:
    """Why `target`, linked from `path`, does not resolve (None when it does)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
        return None
    file, _, anchor = target.partition("#")
    dest = (path.parent / file).resolve() if file else path
    if not dest.exists():
        return "no such file"
    if root != dest and root not in dest.parents:
        return "outside the repository"
    if anchor:
        if dest.suffix != ".md":
            return "an anchor into a file that is not Markdown"
        if anchor not in anchors(dest):
            return f"no heading #{anchor} in {dest.relative_to(root)}"
    return None


def test_slugs_follow_github() -> None:
    assert slug("Search: `GET /v1/retrievals`") == "search-get-v1retrievals"
    assert slug("T's histogram buckets") == "ts-histogram-buckets"
    assert slug("The 1–5 utility scale (`RAGMON_JUDGE_SCALE=utility5`)") == (
        "the-15-utility-scale-ragmon_judge_scaleutility5"
    )
    assert slug("Event explorer: searches with 200,000 events held") == (
        "event-explorer-searches-with-200000-events-held"
    )


def test_the_checker_sees_broken_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A part\n\n```\n## Not a heading\n```\n", encoding="utf-8")
    text = "[a](x.md) ![i](img/p.png) `[no](code.md)`\n```\n[no](block.md)\n```\n"
    assert links(text) == ["x.md", "img/p.png"]
    assert broken(page, "#a-part", tmp_path) is None
    assert broken(page, "page.md#title", tmp_path) is None
    assert broken(page, "#a-parts", tmp_path) == "no heading #a-parts in page.md"
    assert broken(page, "#not-a-heading", tmp_path) == "no heading #not-a-heading in page.md"
    assert broken(page, "missing.md", tmp_path) == "no such file"
    assert broken(page, "../", tmp_path) == "outside the repository"
    assert broken(page, "https://example.com/#anything", tmp_path) is None


def test_no_broken_links() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files and DOCS / "api.md" in files
    bad = [
        f"{path.relative_to(ROOT)}: ({target}) {why}"
        for path in files
        for target in links(path.read_text(encoding="utf-8"))
        if (why := broken(path, target))
    ]
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_every_docs_page_is_in_the_readme_contents() -> None:
    listed = set(links((ROOT / "README.md").read_text(encoding="utf-8")))
    missing = [
        f"docs/{p.name}" for p in sorted(DOCS.glob("*.md")) if f"docs/{p.name}" not in listed
    ]
    assert not missing, f"add a row to README.md's Documentation table for {missing}"


# --- tables --------------------------------------------------------------------------------


def table_rows(path: Path, header: str) -> list[list[str]]:
    """The cells of every row of every table in `path` whose header row starts with `header`."""
    rows: list[list[str]] = []
    inside = False
    for line in prose(path.read_text(encoding="utf-8")).splitlines():
        if line.startswith(header):
            inside = True
            continue
        if inside and line.startswith("|"):
            if not set(line) <= set("|- :"):
                rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
        else:
            inside = False
    return rows


def code_names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# --- settings ------------------------------------------------------------------------------

CONFIGURATION = DOCS / "configuration.md"


def documented_default(value: object) -> str | float | None:
    """What the default cell must start with: a number is compared as a number, `None` for a
    default that the table words itself (a built-in table), text otherwise."""
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, frozenset):
        return ",".join(str(v) for v in sorted(value))
    return None


def shown(expected: str | float | None) -> str:
    return f"{expected:g}" if isinstance(expected, float) else str(expected or "...")


def default_matches(cell: str, expected: str | float | None) -> bool:
    text = cell.replace("`", "").strip()
    if expected is None:
        return True
    if isinstance(expected, float):
        first = re.match(r"-?[\d.]+", text)
        return bool(first) and float(first.group()) == expected
    synonyms = {"true": ("true", "on"), "false": ("false", "off")}.get(expected, (expected,))
    return any(re.match(re.escape(s) + r"(?![\w.,])", text) for s in synonyms)


def code_default(f: Field) -> object:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def test_every_setting_is_documented_with_its_default() -> None:
    documented: dict[str, str] = {}
    problems = []
    for cells in table_rows(CONFIGURATION, "| variable | default |"):
        names = code_names(cells[0])
        if len(names) != 1:
            problems.append(f"docs/configuration.md: one variable per row, not {cells[0]}")
        elif names[0] in documented:
            problems.append(f"docs/configuration.md: {names[0]} has two rows")
        else:
            documented[names[0]] = cells[1]
    read = {f.metadata["env"]: f for f in fields(Settings)}
    for name, f in read.items():
        expected = documented_default(code_default(f))
        if name not in documented:
            problems.append(
                f"{name} (monitor/settings.py, field {f.name}) has no row in "
                f"docs/configuration.md: add | `{name}` | {shown(expected)} | what it does |"
            )
        elif not default_matches(documented[name], expected):
            problems.append(
                f"docs/configuration.md says {name}'s default is {documented[name]!r}, "
                f"the code's is {shown(expected)!r}"
            )
    problems += [
        f"docs/configuration.md: {name} is not read by monitor/settings.py"
        for name in documented
        if name not in read
    ]
    assert not problems, "\n".join(problems)


def tables(path: Path) -> list[tuple[list[str], list[list[str]]]]:
    """Every table of `path`: its header's cells and its rows' cells."""
    out: list[tuple[list[str], list[list[str]]]] = []
    lines = prose(path.read_text(encoding="utf-8")).splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|") or (i and lines[i - 1].startswith("|")):
            continue
        rows = []
        for ln in lines[i:]:
            if not ln.startswith("|"):
                break
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]])
        if len(rows) >= 2 and set("".join(rows[1])) <= set("-: "):
            out.append((rows[0], rows[2:]))
    return out


def test_every_default_the_docs_state_is_the_codes() -> None:
    """Any table with a `default` column (the judge's, the OTLP labels', configuration.md)."""
    read = {f.metadata["env"]: f for f in fields(Settings)}
    problems = []
    for path in user_docs():
        for header, rows in tables(path):
            if "default" not in header:
                continue
            column = header.index("default")
            for cells in rows:
                named = [n for c in cells[:column] for n in code_names(c) if n in read]
                if len(named) != 1 or len(cells) <= column:
                    continue  # a row naming no setting, or several at once
                expected = documented_default(code_default(read[named[0]]))
                if not default_matches(cells[column], expected):
                    problems.append(
                        f"{path.relative_to(ROOT)}: {named[0]}'s default is {cells[column]!r}, "
                        f"the code's is {shown(expected)!r}"
                    )
    assert not problems, "\n".join(problems)


def fixed_limits() -> dict[str, str]:
    """The README's fixed limits (no setting) as the code has them, by the row's first cell."""
    from ragmon.api import otlp
    from ragmon.api.browser import FORM_MAX_BYTES
    from ragmon.core import wire
    from ragmon.store.finish import DAY_EVENTS_KEEP

    return {
        "events (or OTLP retriever spans) per request": f"{wire.MAX_BATCH:,}",
        "passages per event": f"{wire.MAX_PASSAGES:,}",
        "a sign-in or page form": f"{FORM_MAX_BYTES // 1024} KiB",
        "an OTLP export": f"{otlp.MAX_RESOURCE_SPANS:,} resource spans, "
        f"{otlp.MAX_SCOPE_SPANS:,} scopes, {otlp.MAX_SPANS:,} spans, "
        f"{otlp.MAX_ELEMENTS:,} elements, {otlp.MAX_NESTING} levels deep",
        "an app's per-day records (report evidence)": f"{DAY_EVENTS_KEEP:,}",
    }


def test_the_readmes_fixed_limits_are_the_codes() -> None:
    """Rows of the README's limits table whose setting is `fixed` (the others are checked as
    every default is)."""
    stated = {
        cells[0]: cells[2]
        for header, rows in tables(ROOT / "README.md")
        if header[:3] == ["limit", "setting", "default"]
        for cells in rows
        if cells[1] == "fixed"
    }
    assert stated == fixed_limits()


def test_every_ragmon_variable_the_docs_name_is_a_setting() -> None:
    read = {f.metadata["env"] for f in fields(Settings)}
    unknown = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in user_docs()
        for name in re.findall(r"\bRAGMON_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8"))
        if name not in read | NOT_SETTINGS and not name.endswith("_")
    }
    assert not unknown, "not a setting (monitor/settings.py):\n" + "\n".join(sorted(unknown))


def test_the_default_check_can_fail() -> None:
    assert default_matches("0 (no limit)", 0.0) and not default_matches("1 (no limit)", 0.0)
    assert default_matches("`metadata.retriever,span.name`", "metadata.retriever,span.name")
    assert not default_matches("`metadata.retriever`", "metadata.retriever,span.name")
    assert default_matches("off", "false") and not default_matches("on", "false")


# --- measures, metrics, commands, routes -----------------------------------------------------


def test_every_measure_has_a_row_in_measures_md() -> None:
    rows = table_rows(DOCS / "measures.md", "| key | measure | formula |")
    documented = [name for cells in rows for name in code_names(cells[0])]
    keys = [m.key for m in MEASURES]
    assert sorted(documented) == sorted(keys), (
        f"docs/measures.md: missing {sorted(set(keys) - set(documented))}, "
        f"not a measure {sorted(set(documented) - set(keys))}"
    )


# Prometheus external labels the alerts' links read (docs/grafana.md), not metrics.
EXTERNAL_LABELS = {"ragmon_explorer_url", "ragmon_grafana_url"}


def test_every_metric_name_the_docs_use_exists() -> None:
    known = catalog.exposed_names() | {m.name for m in catalog.ALL} | EXTERNAL_LABELS
    unknown = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in user_docs()
        for name in re.findall(r"\bragmon_[a-z0-9_]+", path.read_text(encoding="utf-8"))
        if not name.endswith("_") and name not in known
    }
    assert not unknown, "not in monitor/core/catalog.py:\n" + "\n".join(sorted(unknown))


def test_every_command_and_option_is_in_cli_md() -> None:
    rows = table_rows(DOCS / "cli.md", "| command |")
    usage = {cells[0].strip("`").split()[1]: cells[0] + " " + cells[1] for cells in rows}
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    problems = [
        f"`ragmon {name}` has no row in docs/cli.md" for name in sub.choices if name not in usage
    ]
    problems += [
        f"docs/cli.md: `ragmon {name}` is not a command"
        for name in usage
        if name not in sub.choices
    ]
    for name, command in sub.choices.items():
        for action in command._actions:
            for option in action.option_strings:
                named = re.search(re.escape(option) + r"(?![\w-])", usage.get(name, ""))
                if option.startswith("--") and option != "--help" and not named:
                    problems.append(f"docs/cli.md: `ragmon {name}` does not name {option}")
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def api_routes() -> list[tuple[str, str]]:
    from ragmon.api.app import create_app

    app = create_app(Settings(redis_url="redis://127.0.0.1:1/0"))  # never connected
    return [
        (method, route.path.replace(":path}", "}"))
        for route in app.routes
        if hasattr(route, "path") and hasattr(route, "methods")
        for method in sorted(route.methods - {"HEAD"})
    ]


def test_every_route_is_in_api_md(api_routes: list[tuple[str, str]]) -> None:
    table = " ".join(cells[0] for cells in table_rows(DOCS / "api.md", "| route |"))
    assert ("POST", "/v1/retrievals") in api_routes
    missing = [
        f"{method} {path}"
        for method, path in api_routes
        if path not in {"/docs/oauth2-redirect", "/redoc"}
        and not re.search(rf"`(?:{method} )?{re.escape(path)}(?=[`?\[ ,])", table)
    ]
    assert not missing, f"routes missing from docs/api.md's table: {missing}"
    assert "`GET /ui`" in table


MAX_USER_DOC_WORDS = 40_000  # an afternoon's reading (issue 48): history and methods live in tests/


def test_the_user_docs_fit_in_an_afternoon() -> None:
    """docs/ is read by users: at most MAX_USER_DOC_WORDS words (as `wc -w` counts them). A
    benchmark's method, a simulation's full tables and dated figures go beside their code:
    tests/bench/README.md, tests/stats/README.md, tests/bench/history.md."""
    words = {p.name: len(p.read_text().split()) for p in sorted(DOCS.glob("*.md"))}
    assert sum(words.values()) <= MAX_USER_DOC_WORDS, sorted(words.items(), key=lambda w: -w[1])
