"""The limits of the wire contract, in plain Python: the server's schemas and the SDK share them.

No imports beyond the standard library: the SDK (`ragmon.client`) reads these without pulling
pydantic or anything else of the server into the app.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any

MAX_K = 100
MAX_QUERY_CHARS = 8192
MAX_ID_CHARS = 256
MAX_EVENT_ID_CHARS = 128
MAX_TEXT_CHARS = 32768
MAX_PASSAGES = 200
MAX_BATCH = 1000
MAX_EVENT_AGE = timedelta(days=35)
MAX_CLOCK_SKEW = timedelta(minutes=10)
LABEL_KEYS = ("app", "index", "retriever", "segment")  # in this order they name a series
MAX_TRACE_ID_CHARS = 128
MAX_METADATA_KEYS = 32
MAX_METADATA_BYTES = 4096  # as compact JSON
# A passage score's magnitude: every retriever's scale fits, and the signals' sums of squares
# (shared per series) stay finite whatever one app sends.
MAX_SCORE = 1e12
LABEL_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
MAX_LABEL_CHARS = 64
SEP = "|"  # joins label values in stored names: LABEL_PATTERN keeps it out of every label


# ---- the codec of stored names: series names and the fields of the store's hashes -------------


def series_name(labels: Mapping[str, str]) -> str:
    """The series an event is counted in: its label values in `LABEL_KEYS` order,
    `app|index|retriever|segment`."""
    return SEP.join(labels[k] for k in LABEL_KEYS)


def series_values(name: str) -> tuple[str, ...]:
    """The label values of a series name, in `LABEL_KEYS` order."""
    return tuple(name.split(SEP))


def series_labels(name: str) -> dict[str, str]:
    """The labels of a series name, by key (the inverse of `series_name`)."""
    return dict(zip(LABEL_KEYS, series_values(name), strict=True))


def series_app(name: str) -> str:
    """The app of a series name (or of any stored name that starts with an app)."""
    return name.partition(SEP)[0]


def field_name(*parts: str) -> str:
    """A stored field or name made of parts (`judge_requests|model|outcome`,
    `name|app|index|retriever|segment[|reason]`, a series from its values)."""
    return SEP.join(parts)


def field_parts(field: str) -> list[str]:
    """The parts of a stored field (the inverse of `field_name`)."""
    return field.split(SEP)


def alternatives(value: str) -> list[str]:
    """The label values of a filter `a|b` (any of them: Grafana's `${var:pipe}`)."""
    return value.split(SEP)


def event_ref(app: str, event_id: str) -> str:
    """An event's name inside one deployment: `app|event_id`.

    Event ids are scoped by app: two apps may use the same id, and neither can read, claim or
    probe the other's event. An app label never holds `|`, so the first `|` splits the two
    (an event id may hold `|`).
    """
    return f"{app}{SEP}{event_id}"


def split_ref(ref: str) -> tuple[str, str]:
    """`(app, event_id)` of an `event_ref`."""
    app, _, event_id = ref.partition(SEP)
    return app, event_id


class Status(StrEnum):
    """An event's status: stored in its hash, answered by `GET /v1/retrievals/{id}` and the
    202 of its POST (one type for the store, the workers and the API)."""

    QUEUED = "queued"
    DONE = "done"
    FAILED = "failed"
    SAMPLED_OUT = "sampled_out"


_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.:-]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # one scan in C: the SDK checks every event's id


def event_id_problem(event_id: str) -> str | None:
    """Why an event id could not be read back with `GET /v1/retrievals/{id}`, or None.

    Any other id is readable once percent-encoded in the path (`/` too): only `.` and `..`
    are rewritten by every HTTP client (dot segments), and control characters break logs."""
    if event_id in (".", ".."):
        return "event_id: '.' and '..' cannot be read back in a URL path"
    if _CONTROL.search(event_id):
        return "event_id: control characters are not allowed"
    return None


def default_k(passages: int) -> int:
    """`k` when the app does not say: every passage it got went into the prompt (1 to MAX_K)."""
    return min(max(passages, 1), MAX_K)


def label_value(value: Any) -> str | None:
    """`value` as a metric label: characters outside `[A-Za-z0-9_.:-]` become `_`, cut at
    MAX_LABEL_CHARS; a number becomes its text. None when nothing is left or the value is not
    text or a number. The SDK and the OTLP receiver both repair labels with this, never drop."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = _NOT_LABEL.sub("_", str(value))[:MAX_LABEL_CHARS]
    return text or None
