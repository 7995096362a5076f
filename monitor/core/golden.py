"""The rankings with known grades that `ragmon calibrate` reads: TREC DL lines or ragmon events."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

TREC_K = 10  # the TREC file holds each run's top 20: K = 10 so that 2K = 20 are judged


@dataclass
class Record:
    """One ranking with known grades: `passages` are (id, text, known grade or None)."""

    query: str
    k: int
    retriever: str
    passages: list[tuple[str, str, int | None]]

    @property
    def depth(self) -> int:
        return min(len(self.passages), 2 * self.k)


def parse_record(obj: dict) -> Record:
    """A TREC DL line (`hits[].grade`) or a ragmon event (`passages[].grade`)."""
    if "hits" in obj:
        passages = [
            (str(h.get("docid", h.get("rank"))), h["text"], h.get("grade")) for h in obj["hits"]
        ]
        return Record(
            obj["query"], min(TREC_K, len(passages)), str(obj.get("run", "default")), passages
        )
    if "passages" in obj:
        passages = [(str(p["id"]), p["text"], p.get("grade")) for p in obj["passages"]]
        labels = obj.get("labels") or {}
        return Record(
            obj["query"], int(obj["k"]), str(labels.get("retriever", "default")), passages
        )
    raise ValueError("neither a TREC DL record (hits) nor a ragmon event (passages)")


def parse_records(lines: Iterable[str], source: str, limit: int | None = None) -> list[Record]:
    """Records of JSONL `lines` (of the file `source`); a bad line stops with its line number."""
    out: list[Record] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = parse_record(json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{source}:{n}: {exc}") from None
        for _, _, g in record.passages:
            if g is not None and (type(g) is not int or not 0 <= g <= 3):
                raise ValueError(f"{source}:{n}: known grade {g!r} is not 0-3 or null")
        out.append(record)
        if limit is not None and len(out) >= limit:
            break
    return out
