"""The demo data files, from the knowledge base in `monitor/demo/kb.py` (`python
scripts/regenerate.py` writes them).

Outputs (in `monitor/demo/data/`, committed; regenerate after editing either file):
- `kb.jsonl`: passages `{id, topic, segment, text}`;
- `queries.jsonl`: `{id, query, segment, grades: {passage_id: grade}}` (grades > 0 only);
- `events.jsonl`: one HTTP event per query and retriever, top 2K = 10 passages, K = 5;
- `golden.jsonl`: the same events with the author-intended grade on every passage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ragmon.demo.kb import TOPICS
from ragmon.demo.traffic import RETRIEVERS, make_event

DATA_DIR = Path(__file__).resolve().parent / "data"


def build() -> tuple[list[dict], list[dict]]:
    """The knowledge base and the queries with their intended grades, from `TOPICS`."""
    kb: list[dict] = []
    queries: list[dict] = []
    counters: dict[str, int] = {}
    for topic in TOPICS:
        ids = [f"{topic.name}-{i}" for i in range(1, len(topic.passages) + 1)]
        for pid, text in zip(ids, topic.passages, strict=True):
            kb.append({"id": pid, "topic": topic.name, "segment": topic.segment, "text": text})
        for text, marks in topic.queries:
            grades = dict.fromkeys(ids, 1)
            for ref, grade in marks.items():
                grades[ids[ref - 1] if isinstance(ref, int) else ref] = grade
            n = counters[topic.segment] = counters.get(topic.segment, 0) + 1
            queries.append(
                {
                    "id": f"{topic.segment}-{n:02d}",
                    "query": text,
                    "segment": topic.segment,
                    "grades": {pid: g for pid, g in grades.items() if g > 0},
                }
            )
    known = {p["id"] for p in kb}
    for q in queries:
        missing = set(q["grades"]) - known
        if missing:
            raise ValueError(f"{q['id']}: unknown passage ids {sorted(missing)}")
    return kb, queries


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n" for row in rows)


def files() -> dict[str, str]:
    """kb.jsonl, queries.jsonl, events.jsonl and golden.jsonl: name -> exact text."""
    kb, queries = build()
    texts = {p["id"]: p["text"] for p in kb}
    events: list[dict] = []
    golden: list[dict] = []
    for q in queries:
        for retriever in RETRIEVERS:
            seed = f"demo-data:{q['id']}:{retriever}"
            event = {
                "event_id": f"demo-{q['id']}-{retriever}",
                **make_event(q, texts, retriever, seed=seed, with_grades=True),
            }
            golden.append(event)
            events.append(
                {
                    **event,
                    "passages": [
                        {k: v for k, v in p.items() if k != "grade"} for p in event["passages"]
                    ],
                }
            )
    return {
        "kb.jsonl": _jsonl(kb),
        "queries.jsonl": _jsonl(queries),
        "events.jsonl": _jsonl(events),
        "golden.jsonl": _jsonl(golden),
    }


def main(out: Path = DATA_DIR) -> None:
    """Write the data files into `out` (scripts/regenerate.py writes them with the others)."""
    out.mkdir(parents=True, exist_ok=True)
    written = files()
    for name, text in written.items():
        (out / name).write_text(text, encoding="utf-8")
    print(f"wrote {', '.join(written)} to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA_DIR)
