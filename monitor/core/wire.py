"""The limits of the wire contract, in plain Python: the server's schemas and the SDK share them.

No imports beyond the standard library: the SDK (`ragmon.client`) reads these without pulling
pydantic or anything else of the server into the app.
"""

from __future__ import annotations

import re
from datetime import timedelta
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
LABEL_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
MAX_LABEL_CHARS = 64
SEP = "|"  # joins label values in stored names: LABEL_PATTERN keeps it out of every label


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
