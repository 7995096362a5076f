"""The variables ragmon reads: the process environment over a `.env` file, and a word for each
`RAGMON_*` variable nothing reads (`Settings` declares the ones it does)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection, Mapping
from pathlib import Path


def read_env(
    environ: Mapping[str, str] | None = None, dotenv: str | Path | None = ".env"
) -> dict[str, str]:
    """The variables ragmon sees: `environ` (default `os.environ`) over the `.env` file's."""
    env = dict(read_dotenv(dotenv)) if dotenv else {}
    env.update(os.environ if environ is None else environ)
    return env


PREFIX = "RAGMON_"
#: `RAGMON_*` variables read by ragmon's deployment files and tools rather than by `Settings`.
OTHER_VARIABLES = frozenset(
    {"RAGMON_URL", "RAGMON_API_KEY", "RAGMON_TAG", "RAGMON_DASHBOARDS_SRC", "RAGMON_DASHBOARDS_DIR",
     "RAGMON_ALERTS_SRC",
     "RAGMON_TEST", "RAGMON_TEST_PROCESSES", "RAGMON_SCREENSHOTS", "RAGMON_BENCH_MONITOR"}
)  # fmt: skip


def unknown_variables(env: Mapping[str, str], known: Collection[str]) -> str | None:
    """One line naming each `RAGMON_*` variable of `env` that is not `known` (the settings'
    variables) nor another of ragmon's, with the closest one that is (a misspelled
    `RAGMON_SAMPLE_RAT=0.1` would otherwise be ignored without a word)."""
    # compared without the prefix they share, which would make every name look close
    ours = {name.removeprefix(PREFIX): name for name in known if name.startswith(PREFIX)}
    found = []
    for name in sorted(env):
        if not name.startswith(PREFIX) or name in known or name in OTHER_VARIABLES:
            continue
        close = difflib.get_close_matches(name.removeprefix(PREFIX), ours, n=1, cutoff=0.75)
        found.append(f"{name} (did you mean {ours[close[0]]}?)" if close else name)
    if not found:
        return None
    return f"unknown variable{'s' if len(found) > 1 else ''} ignored: {', '.join(found)}"


def read_dotenv(path: str | Path) -> dict[str, str]:
    """Parse a minimal `.env` file: KEY=VALUE lines, optional `export `, # comments, quotes.

    A quoted value is taken verbatim up to its closing quote; an unquoted value ends at
    ` #` (an inline comment). No variable expansion, no multi-line values.
    """
    p = Path(path)
    if not p.is_file():
        return {}
    out: dict[str, str] = {}
    for line in p.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if value[:1] in ("'", '"') and value.find(value[0], 1) > 0:
            value = value[1 : value.find(value[0], 1)]
        else:
            value = value.split(" #", 1)[0].strip()
        out[key.strip().removeprefix("export ").strip()] = value
    return out
