"""The table `ragmon demo` prints: mean measures per retriever, before and after the index
rebuild that the demo traffic stages in its last week."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from ragmon.core.measure_table import BY_KEY, MEASURES

SUMMARY_MEASURES = tuple(m.key for m in MEASURES if m.summary)


def summary_rows(results: list[dict], split: datetime) -> list[dict]:
    """Mean measures per retriever, over all events and for events before/after `split`."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        if r.get("status") != "done":
            continue
        ret = r["labels"]["retriever"]
        late = datetime.fromisoformat(r["timestamp"]) >= split
        for m in SUMMARY_MEASURES:
            v = r["measures"].get(m)
            if v is not None:
                acc[ret][m].append(v)
        acc[ret]["_ndcg_late" if late else "_ndcg_early"].append(r["measures"]["ndcg"])
    rows = []
    for ret in sorted(acc):
        row: dict = {"retriever": ret, "events": len(acc[ret]["ndcg"])}
        for m in (*SUMMARY_MEASURES, "_ndcg_early", "_ndcg_late"):
            vals = acc[ret][m]
            row[m] = sum(vals) / len(vals) if vals else None
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    head = [
        "retriever",
        "events",
        *(BY_KEY[m].name for m in SUMMARY_MEASURES),
        "nDCG 1st wk",
        "nDCG last wk",
    ]
    keys = ["retriever", "events", *SUMMARY_MEASURES, "_ndcg_early", "_ndcg_late"]
    cells = [head] + [
        [
            str(r[k]) if k in ("retriever", "events") else ("—" if r[k] is None else f"{r[k]:.3f}")
            for k in keys
        ]
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
