"""How each setting's text is read: one parser per kind of value, each raising
`SettingsError` with a message that names what was wrong (`ragmon.settings` adds the
variable's name). Key files are read here too, for the settings and for `ragmon` commands."""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

from ragmon.core.measures import MEASURE_KEYS
from ragmon.core.redis_address import SENTINEL_SCHEMES, parse_sentinel

# USD per million tokens (input, output). Override with RAGMON_PRICES='{"model": [in, out]}'.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
}


class SettingsError(ValueError):
    """A configuration value is missing or invalid; the message names the variable."""


def boolean(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ValueError("must be true or false")


def number(lo: float | None = None, hi: float | None = None, kind: type = float) -> Callable:
    def parse(raw: str) -> float:
        try:
            value = kind(raw.strip())
        except ValueError:
            raise ValueError(f"must be {'an integer' if kind is int else 'a number'}") from None
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
            raise ValueError(f"must be in {bounds}")
        return value

    return parse


def choice(*options: str) -> Callable:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return value

    return parse


def grades(raw: str) -> frozenset[int]:
    try:
        grades = frozenset(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise ValueError("must be a comma-separated list of grades 0-3, e.g. 0,1") from None
    if not grades or not grades <= {0, 1, 2, 3}:
        raise ValueError("must be a non-empty comma-separated list of grades 0-3, e.g. 0,1")
    return grades


_APP_LABEL = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def api_keys(raw: str) -> tuple[str, ...]:
    keys = tuple(part.strip() for part in raw.split(",") if part.strip())
    for key in keys:
        secret, sep, app = key.partition(":")
        if len(secret) < 16:
            raise ValueError("each key must be at least 16 characters (format: key or key:app)")
        if sep and not _APP_LABEL.match(app):
            # `key:` would otherwise silently mean "any app"
            raise ValueError("the app after ':' must be a label value ^[A-Za-z0-9_.:-]{1,64}$")
    return keys


_HOST_NAME = re.compile(r"^(\*|\.?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.?)$")


def host_names(raw: str) -> tuple[str, ...]:
    """`ragmon.internal,api` (`.example.com`: it and its subdomains; `*`: any host)."""
    names = tuple(part.strip().lower() for part in raw.split(",") if part.strip())
    for name in names:
        if not _HOST_NAME.match(name):
            raise ValueError(
                f"{name!r} is not a host name: comma-separated names such as api,ragmon.internal "
                "(.example.com for a domain and its subdomains, * for any host)"
            )
    return names


def read_keys_file(path: str | Path) -> tuple[str, ...]:
    """API keys from a file (e.g. a mounted secret): one `key` or `key:app` per line, `#`
    comments and blank lines ignored. A file without keys is an error, never "auth off"."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    keys = api_keys(",".join(line for line in lines if line))
    if not keys:
        raise ValueError(f"{path} holds no keys")
    return keys


def text_keys(raw: str) -> tuple[str, ...]:
    keys = tuple(part.strip() for part in raw.replace("\n", ",").split(",") if part.strip())
    for key in keys:
        try:
            ok = len(base64.urlsafe_b64decode(key.encode())) == 32
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                "each key must be a Fernet key (32 bytes, url-safe base64): make one with "
                "ragmon text-key"
            )
    return keys


def read_text_keys_file(path: str | Path) -> tuple[str, ...]:
    """Text keys from a file shared by the API and the workers: one per line, newest first,
    `#` comments ignored."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    keys = text_keys(",".join(line.split("#", 1)[0].strip() for line in text.splitlines()))
    if not keys:
        raise ValueError(f"{path} holds no keys")
    return keys


def prices(raw: str) -> dict[str, tuple[float, float]]:
    try:
        data = json.loads(raw)
        prices = {str(m): (float(p[0]), float(p[1])) for m, p in data.items()}
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        raise ValueError(
            'must be JSON like {"model": [usd_per_M_input, usd_per_M_output]}'
        ) from None
    for model, pair in prices.items():
        if not all(math.isfinite(x) and x >= 0 for x in pair):
            raise ValueError(f"prices of {model!r} must be finite numbers >= 0")
    return {**DEFAULT_PRICES, **prices}


def attribute_names(raw: str) -> tuple[str, ...]:
    if raw.strip().lower() == "none":
        return ()
    names = tuple(part.strip() for part in raw.split(","))
    if any(not name or any(c.isspace() for c in name) for name in names):
        raise ValueError(
            "must be comma-separated attribute names without spaces, e.g. "
            "metadata.retriever,span.name, or none"
        )
    return names


def measure_names(raw: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip() for part in raw.split(",")))
    unknown = [name for name in names if name not in MEASURE_KEYS]
    if unknown or not names:
        raise ValueError(f"unknown measure {unknown[0]!r}: use some of {','.join(MEASURE_KEYS)}"
                         if unknown else "name at least one measure, e.g. ndcg,hit")  # fmt: skip
    return names


def k_per_app(raw: str) -> dict[str, int]:
    """`5` (every app) or `support-bot=5,search=10` (`*=5` for any other app)."""
    out: dict[str, int] = {}
    for part in raw.split(","):
        app, sep, k = part.strip().rpartition("=")
        app = app.strip() if sep else "*"
        try:
            value = int(k.strip())
        except ValueError:
            value = 0
        if not 1 <= value <= 100 or not (app == "*" or _APP_LABEL.match(app)) or app in out:
            raise ValueError(
                "must be k (1-100) for every app, or app=k pairs, e.g. support-bot=5,search=10"
            )
        out[app] = value
    return out


def per_app(what: str, example: str, lo: float, hi: float | None = None) -> Callable:
    """`5` (every app) or `support-bot=10,search=2` (a bare number, or `*=`, for any app not
    named): a limit per app, each in [lo, hi]. `what` and `example` word the error."""

    def parse(raw: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for part in raw.split(","):
            app, sep, amount = part.strip().rpartition("=")
            app = app.strip() if sep else "*"
            try:
                value = float(amount.strip())
            except ValueError:
                value = math.nan
            ok = math.isfinite(value) and value >= lo and (hi is None or value <= hi)
            if not ok or not (app == "*" or _APP_LABEL.match(app)) or app in out:
                raise ValueError(
                    f"must be {what} for every app, or app={what.split()[0]} pairs, e.g. {example}"
                )
            out[app] = value
        return out

    return parse


def app_shares(raw: str) -> dict[str, float]:
    """`support-bot=3,search=1`: each app's share of the drain's turns (others: 1)."""
    out: dict[str, float] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        app, sep, share = part.strip().rpartition("=")
        app = app.strip()
        try:
            value = float(share.strip())
        except ValueError:
            value = 0.0
        if not sep or not 0.01 <= value <= 1000 or not _APP_LABEL.match(app) or app in out:
            raise ValueError(
                "must be app=share pairs (a share from 0.01 to 1000, 1 for an app not listed), "
                "e.g. support-bot=3,search=1"
            )
        out[app] = value
    return out


def text(raw: str) -> str | None:
    return raw.strip() or None


def readable_file(raw: str) -> str | None:
    """A path to a file this process can read (checked at start, read when used)."""
    path = raw.strip()
    if not path:
        return None
    if not Path(path).is_file():
        raise ValueError(f"no such file: {path}")
    try:
        with Path(path).open("rb"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    return path


def url(*schemes: str) -> Callable:
    def parse(raw: str) -> str | None:
        value = raw.strip()
        if not value:
            return None
        scheme, sep, rest = value.partition("://")
        if not sep or scheme.lower() not in schemes or not rest:
            raise ValueError(
                f"must be a URL starting with {' or '.join(s + '://' for s in schemes)}"
            )
        if scheme.lower() in SENTINEL_SCHEMES:
            parse_sentinel(value)  # a ValueError names what is wrong
        return value

    return parse
